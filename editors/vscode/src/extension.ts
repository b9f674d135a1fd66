/**
 * The cudice VS Code extension: starts (or connects to) the cudice language server and adds
 * palette commands, a status-bar item and an output channel.
 *
 * `activate` wires the real VS Code API and vscode-languageclient; `activateWith` takes the
 * client factory and the probe as arguments so the unit tests (test/unit) run under plain Node
 * with a stub `vscode` module and a fake client (real-server.test.js uses the real ones). Features themselves (code actions, lenses, hover, diagnostics) are
 * the server's; this file adds none. Real-editor behaviour is covered by test/electron (opt-in).
 */
import * as fs from 'fs';
import * as path from 'path';
import * as vscode from 'vscode';
import { createLanguageClient } from './client';
import { PALETTE, serverCall } from './commands';
import { describePlan, LaunchError, LaunchPlan, planLaunch } from './launch';
import { probeServer } from './probe';
import { nestedSection, serverKeys } from './settings';
import { renderClientState, StatusBar } from './status';

/** What the extension needs from a language client (vscode-languageclient's LanguageClient fits). */
export interface ClientLike {
  start(): Promise<void>;
  stop(timeoutMs?: number): Promise<void>;
  onNotification(method: string, handler: (params: unknown) => void): { dispose(): void };
  sendRequest(method: string, params: unknown): Promise<unknown>;
  sendNotification(method: string, params: unknown): Promise<void>;
}

export interface ClientRequest {
  plan: LaunchPlan;
  initializationOptions: { cudice: Record<string, unknown> };
  /** The `cudice` section for `workspace/configuration` (server keys only). */
  section(): Record<string, unknown>;
  output: vscode.OutputChannel;
}

export interface Deps {
  createClient(req: ClientRequest): ClientLike;
  probe(plan: LaunchPlan): Promise<string | undefined>;
}

export interface Api {
  /** The running client, if any (for tests and other extensions). */
  client(): ClientLike | undefined;
  /** Settles when the current start attempt has finished (successfully or not). */
  ready: Promise<boolean>;
  restart(): Promise<boolean>;
  /** Stops the client and the server it started. */
  stop(): Promise<void>;
}

function clientOnlyKeys(extensionPath: string): string[] {
  const file = path.join(extensionPath, 'client-settings.json');
  return Object.keys(JSON.parse(fs.readFileSync(file, 'utf8')).properties);
}

export function activateWith(context: vscode.ExtensionContext, deps: Deps): Api {
  const output = vscode.window.createOutputChannel('cudice');
  const item = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Left, 0);
  const status = new StatusBar(item, new vscode.ThemeColor('statusBarItem.errorBackground'));
  const clientOnly = clientOnlyKeys(context.extensionPath);
  const keys = serverKeys(context.extension.packageJSON, clientOnly);
  context.subscriptions.push(output, item);

  const config = () => vscode.workspace.getConfiguration();
  const section = () => nestedSection(keys, (k) => config().get(k));
  let client: ClientLike | undefined;

  const fail = async (message: string): Promise<false> => {
    output.appendLine(`[cudice] ${message}`);
    status.apply(renderClientState('stopped', message));
    const choice = await vscode.window.showErrorMessage(message, 'Open Settings', 'Show Output');
    if (choice === 'Open Settings') {
      void vscode.commands.executeCommand('workbench.action.openSettings', 'cudice.server');
    } else if (choice === 'Show Output') {
      output.show(true);
    }
    return false;
  };

  const start = async (): Promise<boolean> => {
    status.apply(renderClientState('starting'));
    let plan: LaunchPlan;
    try {
      plan = planLaunch({
        path: config().get<string>('cudice.server.path') ?? '',
        pythonPath: config().get<string>('cudice.server.pythonPath') ?? '',
        tcp: config().get<string>('cudice.server.tcp') ?? '',
      });
    } catch (err) {
      return fail(err instanceof LaunchError ? err.message : String(err));
    }
    output.appendLine(`[cudice] starting language server: ${describePlan(plan)}`);
    const missing = await deps.probe(plan);
    if (missing) {
      return fail(missing);
    }
    const c = deps.createClient({ plan, initializationOptions: { cudice: section() }, section, output });
    context.subscriptions.push(c.onNotification('cudice/status', (p) => status.update(p)));
    try {
      await c.start();
    } catch (err) {
      const why = err instanceof Error ? err.message : String(err);
      const where = plan.kind === 'tcp' ? ` (is \`cudice-lsp --tcp\` running and forwarded to ${describePlan(plan)}?)` : '';
      return fail(`cudice language server failed to start: ${why}${where}`);
    }
    client = c;
    return true;
  };

  const stop = async (): Promise<void> => {
    const c = client;
    client = undefined;
    // The server stops its worker processes before answering `shutdown`: allow more than the
    // client's 2 s default so a restart does not log a spurious time-out.
    if (c) await c.stop(10_000).catch((err) => output.appendLine(`[cudice] stopping the server: ${err}`));
  };

  const runPalette = async (id: string): Promise<unknown> => {
    const call = serverCall(id, vscode.window.activeTextEditor);
    if (typeof call === 'string') {
      return vscode.window.showWarningMessage(call);
    }
    if (!client) {
      return vscode.window.showErrorMessage(
        'The cudice language server is not running; see the cudice output (cudice: Show output).',
      );
    }
    return client.sendRequest('workspace/executeCommand', call);
  };

  for (const id of Object.keys(PALETTE)) {
    context.subscriptions.push(vscode.commands.registerCommand(id, () => runPalette(id)));
  }
  context.subscriptions.push(
    vscode.commands.registerCommand('cudice.showOutput', () => output.show(true)),
    vscode.commands.registerCommand('cudice.restartServer', async () => {
      await stop();
      return start();
    }),
    vscode.workspace.onDidChangeConfiguration(async (e) => {
      if (clientOnly.some((k) => e.affectsConfiguration(k))) {
        const choice = await vscode.window.showInformationMessage(
          'cudice: the server connection settings changed. Restart the server to use them?',
          'Restart',
        );
        if (choice === 'Restart') await vscode.commands.executeCommand('cudice.restartServer');
      } else if (client && e.affectsConfiguration('cudice')) {
        await client.sendNotification('workspace/didChangeConfiguration', { settings: { cudice: section() } });
      }
    }),
    { dispose: () => void stop() },
  );

  const api: Api = { client: () => client, ready: start(), restart: async () => (await stop(), start()), stop };
  return api;
}

let active: Api | undefined;

export function activate(context: vscode.ExtensionContext): Api {
  active = activateWith(context, { createClient: createLanguageClient, probe: (plan) => probeServer(plan) });
  return active;
}

/** VS Code waits for this promise, so the server is shut down cleanly on exit. */
export function deactivate(): Promise<void> | undefined {
  const api = active;
  active = undefined;
  return api?.stop();
}
