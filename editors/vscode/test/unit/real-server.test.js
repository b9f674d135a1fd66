'use strict';
// The extension with the real vscode-languageclient and the real `python -m cudice.server`
// (stub `vscode` module only): activation starts the server, its `cudice/status` reaches the
// status bar, and a palette command round-trips through workspace/executeCommand.
// Skipped when the Python interpreter (CUDICE_TEST_PYTHON, default python3) lacks cudice.
require('./stub/register');
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { spawn, spawnSync } = require('node:child_process');
const net = require('node:net');
const vscode = require('vscode');
const { activate } = require('../../out/extension');
const pkg = require('../../package.json');

const python = process.env.CUDICE_TEST_PYTHON || 'python3';
// The servers started here (they inherit this environment) load no bundled demo model, so the
// status settles at "no model" whatever the order of start-up notifications.
process.env.CUDICE_NO_BUNDLED_MODEL = '1';
const hasCudice = spawnSync(python, ['-c', 'import cudice.server, pygls']).status === 0;

async function waitFor(what, predicate, ms) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (predicate()) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.fail(`timed out after ${ms} ms waiting for ${what}`);
}

test('activate -> real server -> status bar and commands', { skip: !hasCudice && `${python} has no cudice`, timeout: 90_000 }, async () => {
  vscode.stub.reset();
  vscode.stub.state.settings = { 'cudice.server.pythonPath': python };
  const context = { subscriptions: [], extensionPath: path.join(__dirname, '..', '..'), extension: { packageJSON: pkg } };
  const api = activate(context);
  try {
    const t0 = Date.now();
    assert.equal(await api.ready, true, `server did not start: ${JSON.stringify(vscode.stub.state.messages)}`);
    const item = vscode.stub.state.statusItems[0];
    await waitFor('a cudice/status notification in the status bar', () => item.text.includes('no model'), 30_000);
    console.log(`status after ${Date.now() - t0} ms: ${item.text}`);
    assert.equal(item.text, '$(circle-slash) cudice: no model');
    assert.match(item.tooltip, /cudice\.model\.path/);

    // Palette "Reload model" goes through executeCommand to the server and back.
    vscode.stub.state.messages = [];
    const reply = await vscode.stub.state.commands.get('cudice.editor.reloadModel')();
    console.log(`cudice.reloadModel replied ${JSON.stringify(reply)}`);
    assert.notEqual(reply, undefined, 'the server did not answer cudice.reloadModel');
  } finally {
    const t0 = Date.now();
    await api.stop();
    console.log(`server stopped in ${Date.now() - t0} ms`);
  }
});

async function freePort() {
  const srv = net.createServer();
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  const { port } = srv.address();
  await new Promise((r) => srv.close(r));
  return port;
}

test('tcp setting -> connects to a running cudice-lsp --tcp', { skip: !hasCudice && `${python} has no cudice`, timeout: 90_000 }, async () => {
  const port = await freePort();
  const server = spawn(python, ['-m', 'cudice.server', '--tcp', '--host', '127.0.0.1', '--port', String(port)],
    { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  server.stderr.on('data', (d) => (log += d));
  try {
    // Wait for the server's "listening" line; a probe connection would disturb it.
    await waitFor(`cudice-lsp --tcp to listen (log: ${log})`, () => log.includes('listening on'), 30_000);
    vscode.stub.reset();
    vscode.stub.state.settings = { 'cudice.server.tcp': `127.0.0.1:${port}` };
    const context = { subscriptions: [], extensionPath: path.join(__dirname, '..', '..'), extension: { packageJSON: pkg } };
    const api = activate(context);
    try {
      assert.equal(await api.ready, true, `no connection: ${JSON.stringify(vscode.stub.state.messages)}`);
      const item = vscode.stub.state.statusItems[0];
      await waitFor('cudice/status over TCP', () => item.text.includes('no model'), 30_000);
      assert.equal(item.text, '$(circle-slash) cudice: no model');
    } finally {
      await api.stop();
    }
  } finally {
    server.kill();
  }
});
