/**
 * How to start or reach the cudice language server, decided from the client-only settings.
 *
 * Pure: no VS Code API, no processes. Order: `cudice.server.tcp` (connect to a running server),
 * then `cudice.server.path` (an executable), then `cudice.server.pythonPath`
 * (`<python> -m cudice.server`), else `cudice-lsp` from PATH. It does not check that the
 * program exists (probe.ts does) nor does it pick a Python interpreter from other extensions.
 */

export interface ClientSettings {
  path: string;
  pythonPath: string;
  tcp: string;
}

export type LaunchPlan =
  | { kind: 'exec'; command: string; args: string[]; via: 'path' | 'pythonPath' | 'PATH' }
  | { kind: 'tcp'; host: string; port: number };

export class LaunchError extends Error {}

export const DEFAULT_EXECUTABLE = 'cudice-lsp';

/** `host:port` or `[v6addr]:port` -> parts; throws LaunchError saying what is wrong and how to fix it. */
export function parseHostPort(text: string): { host: string; port: number } {
  const m = /^\[([0-9a-fA-F:]+)\]:(\d{1,5})$/.exec(text) ?? /^([^\s:[\]]+):(\d{1,5})$/.exec(text);
  const port = m ? Number(m[2]) : NaN;
  if (!m || port < 1 || port > 65535) {
    throw new LaunchError(
      `cudice.server.tcp is "${text}", which is not host:port with a port in 1..65535. ` +
        'Set it to e.g. "127.0.0.1:2087" (the address `cudice-lsp --tcp` listens on), or clear it to start a local server.',
    );
  }
  return { host: m[1], port };
}

export function planLaunch(settings: ClientSettings): LaunchPlan {
  const tcp = settings.tcp.trim();
  if (tcp) {
    return { kind: 'tcp', ...parseHostPort(tcp) };
  }
  const path = settings.path.trim();
  if (path) {
    return { kind: 'exec', command: path, args: [], via: 'path' };
  }
  const python = settings.pythonPath.trim();
  if (python) {
    return { kind: 'exec', command: python, args: ['-m', 'cudice.server'], via: 'pythonPath' };
  }
  return { kind: 'exec', command: DEFAULT_EXECUTABLE, args: [], via: 'PATH' };
}

export function describePlan(plan: LaunchPlan): string {
  return plan.kind === 'tcp'
    ? `TCP ${plan.host}:${plan.port}`
    : [plan.command, ...plan.args].join(' ');
}
