/**
 * Palette commands -> the server's `workspace/executeCommand` calls, with arguments taken from
 * the active editor (contract: generateKernel(uri, position), infillKernel(uri, range),
 * verify(uri), reloadModel(), cancel([uri])).
 *
 * The palette IDs (`cudice.editor.*`) differ from the server's command names on purpose: the
 * language client registers the server's names itself (they carry arguments when they come from
 * code actions and code lenses), and one ID cannot be registered twice.
 */

export interface PositionLike {
  line: number;
  character: number;
}

export interface EditorLike {
  document: { uri: { toString(): string }; languageId: string; isDirty?: boolean };
  selection: { active: PositionLike; start: PositionLike; end: PositionLike };
}

export interface ServerCall {
  command: string;
  arguments: unknown[];
}

interface PaletteCommand {
  server: string;
  needsEditor: boolean;
  args(editor: EditorLike | undefined): unknown[];
}

const pos = (p: PositionLike): PositionLike => ({ line: p.line, character: p.character });

export const PALETTE: Record<string, PaletteCommand> = {
  'cudice.editor.generateKernel': {
    server: 'cudice.generateKernel',
    needsEditor: true,
    args: (e) => [e!.document.uri.toString(), pos(e!.selection.active)],
  },
  'cudice.editor.infillKernel': {
    server: 'cudice.infillKernel',
    needsEditor: true,
    args: (e) => [e!.document.uri.toString(), { start: pos(e!.selection.start), end: pos(e!.selection.end) }],
  },
  'cudice.editor.verify': {
    server: 'cudice.verify',
    needsEditor: true,
    args: (e) => [e!.document.uri.toString()],
  },
  'cudice.editor.reloadModel': { server: 'cudice.reloadModel', needsEditor: false, args: () => [] },
  // With an editor: that document's jobs; without: every job.
  'cudice.editor.cancel': {
    server: 'cudice.cancel',
    needsEditor: false,
    args: (e) => (e ? [e.document.uri.toString()] : []),
  },
};

/** The server call for a palette command, or a message saying why it cannot run now. */
export function serverCall(id: string, editor: EditorLike | undefined): ServerCall | string {
  const cmd = PALETTE[id];
  if (!cmd) {
    return `unknown cudice command ${id}`;
  }
  if (cmd.needsEditor && !editor) {
    return `${cmd.server} works on the active editor: open a KernelBench Python file (a Model or a ModelNew) first.`;
  }
  return { command: cmd.server, arguments: cmd.args(editor) };
}
