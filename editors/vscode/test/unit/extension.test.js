'use strict';
require('./stub/register');
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const vscode = require('vscode');
const { activateWith } = require('../../out/extension');
const pkg = require('../../package.json');

const { state } = vscode.stub;
const extensionPath = path.join(__dirname, '..', '..');

function fakeClient({ failStart } = {}) {
  const client = {
    handlers: {}, requests: [], notifications: [], started: false, stopped: false,
    start: async () => {
      if (failStart) throw new Error(failStart);
      client.started = true;
    },
    stop: async () => { client.stopped = true; },
    onNotification(method, h) { client.handlers[method] = h; return { dispose() {} }; },
    sendRequest: async (method, params) => { client.requests.push({ method, params }); return null; },
    sendNotification: async (method, params) => { client.notifications.push({ method, params }); },
  };
  return client;
}

function activate({ settings = {}, probe = async () => undefined, client = fakeClient() } = {}) {
  vscode.stub.reset();
  state.settings = settings;
  const created = [];
  const context = { subscriptions: [], extensionPath, extension: { packageJSON: pkg } };
  const api = activateWith(context, {
    probe,
    createClient: (req) => (created.push(req), client),
  });
  return { api, client, created, context, statusItem: state.statusItems[0], output: state.outputs[0] };
}

const editor = (uri = 'file:///w/relu.py') => ({
  document: { uri: { toString: () => uri }, languageId: 'python' },
  selection: {
    active: { line: 7, character: 4 }, start: { line: 7, character: 0 }, end: { line: 9, character: 2 },
  },
});

test('activation registers every contributed command', async () => {
  const { api } = activate();
  assert.equal(await api.ready, true);
  const contributed = pkg.contributes.commands.map((c) => c.command);
  for (const id of contributed) assert.ok(state.commands.has(id), `${id} not registered`);
  assert.deepEqual([...state.commands.keys()].sort(), [...contributed].sort());
});

test('activates only on workspaces with candidates (or a .cudice marker) and on its commands', () => {
  // not on every Python file: that started a server, clangd's warm-up and the model load anywhere;
  // contributed commands activate the extension by themselves (VS Code >= 1.74)
  assert.deepEqual(pkg.activationEvents.sort(), ['workspaceContains:**/*_cuda.py', 'workspaceContains:**/.cudice']);
  assert.ok(!pkg.activationEvents.some((e) => e.startsWith('onLanguage:')));
  assert.equal(pkg.engines.vscode, '^1.82.0');
  assert.match(pkg.dependencies['vscode-languageclient'], /^\^9\./);
});

test('server options come from the settings; only server keys are sent', async () => {
  const { api, created } = activate({
    settings: {
      'cudice.server.pythonPath': '/venv/bin/python', 'cudice.model.path': '/ckpt', 'cudice.sampler.topK': 3,
    },
  });
  await api.ready;
  assert.equal(created.length, 1);
  assert.deepEqual(created[0].plan, { kind: 'exec', command: '/venv/bin/python', args: ['-m', 'cudice.server'], via: 'pythonPath' });
  const sent = created[0].initializationOptions.cudice;
  assert.equal(sent.model.path, '/ckpt');
  assert.equal(sent.sampler.topK, 3);
  assert.equal(sent.server, undefined, 'client-only cudice.server.* must not reach the server');
  assert.equal(sent.trace, undefined);
  assert.deepEqual(created[0].section(), sent);
});

test('tcp setting -> a TCP plan, and no probe of a local program', async () => {
  let probed = null;
  const { api, created } = activate({
    settings: { 'cudice.server.tcp': '127.0.0.1:2087', 'cudice.server.path': '/x' },
    probe: async (plan) => { probed = plan; },
  });
  await api.ready;
  assert.deepEqual(created[0].plan, { kind: 'tcp', host: '127.0.0.1', port: 2087 });
  assert.deepEqual(probed, created[0].plan);
});

test('cudice/status notifications update the status bar', async () => {
  const { api, client, statusItem } = activate();
  await api.ready;
  assert.equal(statusItem.visible, true);
  client.handlers['cudice/status']({ model: 'loading', message: 'reading weights', lastVerdict: null, uri: null });
  assert.equal(statusItem.text, '$(sync~spin) cudice: loading model');
  client.handlers['cudice/status']({ model: 'ready', message: '', lastVerdict: 'compile error', uri: 'file:///a.py' });
  assert.equal(statusItem.text, '$(check) cudice: ready · compile error');
});

test('missing server -> a clear error, no client, status says not running', async () => {
  const msg = 'cudice language server not found: `cudice-lsp` is not on PATH. Install it with `pip install cudice`';
  const { api, created, statusItem, output } = activate({ probe: async () => msg });
  assert.equal(await api.ready, false);
  assert.equal(created.length, 0);
  const errors = state.messages.filter((m) => m.level === 'error');
  assert.equal(errors.length, 1);
  assert.equal(errors[0].text, msg);
  assert.deepEqual(errors[0].items, ['Open Settings', 'Show Output']);
  assert.equal(statusItem.text, '$(warning) cudice: server not running');
  assert.ok(output.lines.some((l) => l.includes(msg)));
  assert.equal(api.client(), undefined);
});

test('"Open Settings" on the error opens the cudice.server settings', async () => {
  const { api } = activate({ probe: async () => 'cudice language server not found' });
  await api.ready;
  assert.equal(state.executed.length, 0, 'no button clicked yet');
  state.answers = { 'cudice language server not found': 'Open Settings' };
  await api.restart();
  assert.deepEqual(state.executed.at(-1), { id: 'workbench.action.openSettings', args: ['cudice.server'] });
});

test('bad tcp setting -> the parse error is shown, nothing started', async () => {
  const { api, created } = activate({ settings: { 'cudice.server.tcp': 'gpu-box' } });
  assert.equal(await api.ready, false);
  assert.equal(created.length, 0);
  assert.match(state.messages[0].text, /cudice\.server\.tcp is "gpu-box"/);
});

test('a failing client start (TCP refused) is reported with a hint', async () => {
  const { api } = activate({
    settings: { 'cudice.server.tcp': '127.0.0.1:1' },
    client: fakeClient({ failStart: 'cannot connect to 127.0.0.1:1: ECONNREFUSED' }),
  });
  assert.equal(await api.ready, false);
  assert.match(state.messages[0].text, /failed to start: cannot connect .*ECONNREFUSED/);
  assert.match(state.messages[0].text, /cudice-lsp --tcp/);
});

test('palette commands send the server command with editor arguments', async () => {
  const { api, client } = activate();
  await api.ready;
  state.activeTextEditor = editor();
  await state.commands.get('cudice.editor.generateKernel')();
  await state.commands.get('cudice.editor.infillKernel')();
  await state.commands.get('cudice.editor.verify')();
  await state.commands.get('cudice.editor.reloadModel')();
  await state.commands.get('cudice.editor.cancel')();
  state.activeTextEditor = undefined;
  await state.commands.get('cudice.editor.cancel')();
  assert.deepEqual(client.requests.map((r) => r.params), [
    { command: 'cudice.generateKernel', arguments: ['file:///w/relu.py', { line: 7, character: 4 }] },
    { command: 'cudice.infillKernel', arguments: ['file:///w/relu.py', { start: { line: 7, character: 0 }, end: { line: 9, character: 2 } }] },
    { command: 'cudice.verify', arguments: ['file:///w/relu.py'] },
    { command: 'cudice.reloadModel', arguments: [] },
    { command: 'cudice.cancel', arguments: ['file:///w/relu.py'] },
    { command: 'cudice.cancel', arguments: [] },
  ]);
  assert.ok(client.requests.every((r) => r.method === 'workspace/executeCommand'));
});

test('palette command without an editor warns instead of calling the server', async () => {
  const { api, client } = activate();
  await api.ready;
  await state.commands.get('cudice.editor.verify')();
  assert.equal(client.requests.length, 0);
  assert.match(state.messages.at(-1).text, /open a KernelBench Python file/);
  assert.equal(state.messages.at(-1).level, 'warning');
});

test('palette command while the server is down says so', async () => {
  const { api } = activate({ probe: async () => 'not found' });
  await api.ready;
  state.activeTextEditor = editor();
  await state.commands.get('cudice.editor.verify')();
  assert.match(state.messages.at(-1).text, /server is not running/);
});

test('show output reveals the channel', async () => {
  const { api, output } = activate();
  await api.ready;
  await state.commands.get('cudice.showOutput')();
  assert.equal(output.shown, 1);
});

test('changing a server setting pushes didChangeConfiguration with server keys only', async () => {
  const { api, client } = activate({ settings: { 'cudice.model.path': '/a' } });
  await api.ready;
  state.settings['cudice.model.path'] = '/b';
  await vscode.stub.fireConfigChange(['cudice.model.path']);
  assert.deepEqual(client.notifications, [
    { method: 'workspace/didChangeConfiguration', params: { settings: { cudice: { model: { path: '/b' } } } } },
  ]);
});

test('changing a connection setting offers a restart and restarts on request', async () => {
  const { api, client, created } = activate();
  await api.ready;
  state.answers = { 'cudice: the server connection settings changed': 'Restart' };
  state.settings['cudice.server.path'] = '/opt/cudice-lsp';
  await vscode.stub.fireConfigChange(['cudice.server.path']);
  assert.equal(client.stopped, true);
  assert.equal(created.length, 2);
  assert.equal(created[1].plan.command, '/opt/cudice-lsp');
  assert.equal(client.notifications.length, 0);
});
