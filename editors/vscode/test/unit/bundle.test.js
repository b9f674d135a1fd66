'use strict';
// The shipped file is the esbuild bundle (package.json "main"), not out/: load it and run one
// activation through it, so a bundling mistake (a missing module, a wrong external) fails here.
require('./stub/register');
const test = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const vscode = require('vscode');
const pkg = require('../../package.json');

const root = path.join(__dirname, '..', '..');

test('package.json main is the bundle and it exports activate/deactivate', () => {
  assert.equal(pkg.main, './dist/extension.js');
  const ext = require(path.join(root, pkg.main));
  assert.equal(typeof ext.activate, 'function');
  assert.equal(typeof ext.deactivate, 'function');
});

test('the bundle activates and reports a missing server clearly', async () => {
  vscode.stub.reset();
  vscode.stub.state.settings = { 'cudice.server.path': '/nonexistent/cudice-lsp' };
  const ext = require(path.join(root, pkg.main));
  const context = { subscriptions: [], extensionPath: root, extension: { packageJSON: pkg } };
  const api = ext.activate(context);
  assert.equal(await api.ready, false);
  const [err] = vscode.stub.state.messages.filter((m) => m.level === 'error');
  assert.match(err.text, /cudice language server not found: \/nonexistent\/cudice-lsp does not exist/);
  assert.equal(await ext.deactivate(), undefined);
});
