/**
 * The status-bar item: model state and last verdict from the server's `cudice/status`
 * notification, or the client's own state (starting, not running).
 *
 * `renderStatus` is pure (tested alone); `StatusBar` only copies its result onto the item.
 * It does not show progress of a running job (the language client shows work-done progress).
 */

export type ModelState = 'missing' | 'idle' | 'loading' | 'ready' | 'error';

export interface CudiceStatus {
  model: ModelState;
  message: string;
  lastVerdict: string | null;
  uri: string | null;
}

export interface Rendered {
  text: string;
  tooltip: string;
  isError: boolean;
}

const ICON: Record<ModelState, string> = {
  missing: '$(circle-slash)',
  idle: '$(circle-outline)',
  loading: '$(sync~spin)',
  ready: '$(check)',
  error: '$(error)',
};

const LABEL: Record<ModelState, string> = {
  missing: 'no model',
  idle: 'model not loaded',
  loading: 'loading model',
  ready: 'ready',
  error: 'model error',
};

export function isCudiceStatus(value: unknown): value is CudiceStatus {
  const v = value as Partial<CudiceStatus> | null;
  return !!v && typeof v === 'object' && typeof v.model === 'string' && v.model in ICON;
}

export function renderStatus(status: CudiceStatus): Rendered {
  const verdict = status.lastVerdict ? ` · ${status.lastVerdict}` : '';
  const lines = [`cudice model: ${LABEL[status.model]}`];
  if (status.message) lines.push(status.message);
  if (status.lastVerdict) lines.push(`last verdict: ${status.lastVerdict}${status.uri ? ` (${status.uri})` : ''}`);
  lines.push('Click to show the cudice output.');
  return {
    text: `${ICON[status.model]} cudice: ${LABEL[status.model]}${verdict}`,
    tooltip: lines.join('\n'),
    isError: status.model === 'error',
  };
}

export function renderClientState(state: 'starting' | 'stopped', why = ''): Rendered {
  return state === 'starting'
    ? { text: '$(sync~spin) cudice: starting', tooltip: 'Starting the cudice language server…', isError: false }
    : {
        text: '$(warning) cudice: server not running',
        tooltip: `${why || 'The cudice language server is not running.'}\nClick to show the cudice output.`,
        isError: true,
      };
}

export interface StatusItemLike {
  text: string;
  tooltip?: unknown;
  command?: unknown;
  backgroundColor?: unknown;
  show(): void;
}

export class StatusBar {
  constructor(
    private readonly item: StatusItemLike,
    private readonly errorBackground: unknown,
  ) {
    item.command = 'cudice.showOutput';
    item.show();
  }

  apply(r: Rendered): void {
    this.item.text = r.text;
    this.item.tooltip = r.tooltip;
    this.item.backgroundColor = r.isError ? this.errorBackground : undefined;
  }

  /** Handler for `cudice/status`; ignores malformed payloads (returns false). */
  update(payload: unknown): boolean {
    if (!isCudiceStatus(payload)) return false;
    this.apply(renderStatus(payload));
    return true;
  }
}
