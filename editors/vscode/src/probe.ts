/**
 * Checks, before starting it, that the configured server program exists and is cudice, so a
 * missing install gives one clear message instead of a stream of restart errors.
 *
 * Runs `<program> --print-schema` (fast: imports neither torch nor the model). It does not
 * check TCP servers (the connection attempt reports those) nor the server's version.
 */
import { execFile } from 'child_process';
import { LaunchPlan } from './launch';

export type Exec = (
  command: string,
  args: string[],
  callback: (error: (Error & { code?: string | number | null }) | null, stdout: string, stderr: string) => void,
) => void;

const realExec: Exec = (command, args, callback) => {
  execFile(command, args, { timeout: 30_000, windowsHide: true }, (err, stdout, stderr) =>
    callback(err, String(stdout), String(stderr)),
  );
};

const INSTALL_HINT =
  'Install it with `pip install cudice` (or `pip install -e .` in a cudice checkout) into a Python environment, ' +
  'then set `cudice.server.pythonPath` to that environment\'s python, or `cudice.server.path` to its `cudice-lsp`.';

/** Resolves to undefined when the server can be started, else to a message for the user. */
export function probeServer(plan: LaunchPlan, exec: Exec = realExec): Promise<string | undefined> {
  if (plan.kind === 'tcp') {
    return Promise.resolve(undefined);
  }
  return new Promise((resolve) => {
    exec(plan.command, [...plan.args, '--print-schema'], (error, stdout, stderr) => {
      if (!error && stdout.includes('"cudice.')) {
        resolve(undefined);
        return;
      }
      const what =
        plan.via === 'pythonPath' ? `${plan.command} -m cudice.server` : plan.via === 'path' ? plan.command : '`cudice-lsp`';
      if (error && error.code === 'ENOENT') {
        const where = plan.via === 'PATH' ? 'is not on PATH' : 'does not exist';
        resolve(`cudice language server not found: ${what} ${where}. ${INSTALL_HINT}`);
      } else if (/No module named ['"]?cudice/.test(stderr)) {
        resolve(`cudice is not installed for ${plan.command} (No module named cudice). ${INSTALL_HINT}`);
      } else {
        const detail = (stderr || (error ? error.message : '') || stdout).trim().split('\n').slice(-3).join(' ');
        resolve(`cudice language server could not start: ${what} failed (${detail}). ${INSTALL_HINT}`);
      }
    });
  });
}
