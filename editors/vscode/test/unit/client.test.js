'use strict';
// The real vscode-languageclient, loaded against the stub `vscode` module.
require('./stub/register');
const test = require('node:test');
const assert = require('node:assert/strict');
const net = require('node:net');
const { serverOptions, createLanguageClient } = require('../../out/client');

test('exec plan -> stdio child process with the plan\'s argv', () => {
  const opts = serverOptions({ kind: 'exec', command: '/venv/bin/python', args: ['-m', 'cudice.server'], via: 'pythonPath' });
  assert.equal(opts.command, '/venv/bin/python');
  assert.deepEqual(opts.args, ['-m', 'cudice.server']);
  assert.equal(opts.transport, undefined, 'stdio is the default transport');
});

test('tcp plan -> a socket connected to host:port', async () => {
  const server = net.createServer((s) => s.end());
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address();
  try {
    const streams = await serverOptions({ kind: 'tcp', host: '127.0.0.1', port })();
    assert.equal(streams.reader, streams.writer);
    assert.equal(streams.reader.remotePort, port);
    streams.reader.destroy();
  } finally {
    server.close();
  }
});

test('tcp plan to a closed port rejects with a readable reason', async () => {
  const server = net.createServer();
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address();
  await new Promise((r) => server.close(r));
  await assert.rejects(serverOptions({ kind: 'tcp', host: '127.0.0.1', port })(), (err) => {
    assert.match(err.message, new RegExp(`cannot connect to 127\\.0\\.0\\.1:${port}: .*ECONNREFUSED`));
    return true;
  });
});

test('the client answers workspace/configuration for cudice with server keys only', async () => {
  const section = { model: { path: '/ckpt' } };
  const client = createLanguageClient({
    plan: { kind: 'exec', command: 'cudice-lsp', args: [], via: 'PATH' },
    initializationOptions: { cudice: section },
    section: () => section,
    output: { appendLine() {}, append() {} },
  });
  const opts = client.clientOptions;
  assert.deepEqual(opts.initializationOptions, { cudice: section });
  assert.deepEqual(opts.documentSelector.map((d) => d.language), ['python', 'cuda-cpp']);
  const configure = opts.middleware.workspace.configuration;
  assert.deepEqual(configure({ items: [{ section: 'cudice' }] }, null, () => 'next'), [section]);
  assert.equal(configure({ items: [{ section: 'python' }] }, null, () => 'next'), 'next');
});
