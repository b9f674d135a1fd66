/**
 * Builds the real vscode-languageclient `LanguageClient` for a launch plan: a child process
 * speaking stdio, or a TCP socket to a `cudice-lsp --tcp` server.
 *
 * Documents served: Python and CUDA files on disk. The settings middleware answers
 * `workspace/configuration` for the `cudice` section with the server's keys only.
 */
import * as net from 'net';
import { LanguageClient, LanguageClientOptions, ServerOptions, StreamInfo } from 'vscode-languageclient/node';
import type { ClientLike, ClientRequest } from './extension';
import { LaunchPlan } from './launch';

export function serverOptions(plan: LaunchPlan): ServerOptions {
  if (plan.kind === 'tcp') {
    return () =>
      new Promise<StreamInfo>((resolve, reject) => {
        const socket = net.connect(plan.port, plan.host);
        socket.once('connect', () => resolve({ reader: socket, writer: socket }));
        socket.once('error', (err) => reject(new Error(`cannot connect to ${plan.host}:${plan.port}: ${err.message}`)));
      });
  }
  return { command: plan.command, args: plan.args, options: { env: process.env } };
}

export function createLanguageClient(req: ClientRequest): ClientLike {
  const options: LanguageClientOptions = {
    documentSelector: [
      { scheme: 'file', language: 'python' },
      { scheme: 'file', language: 'cuda-cpp' },
    ],
    outputChannel: req.output,
    initializationOptions: req.initializationOptions,
    middleware: {
      workspace: {
        // Answer `workspace/configuration` for section `cudice` with the server's keys only.
        configuration: (params, token, next) => {
          if (params.items.every((i) => i.section === 'cudice')) {
            return params.items.map(() => req.section());
          }
          return next(params, token);
        },
      },
    },
  };
  return new LanguageClient('cudice', 'cudice', serverOptions(req.plan), options) as unknown as ClientLike;
}
