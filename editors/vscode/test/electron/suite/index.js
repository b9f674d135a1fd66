'use strict';
// Runs inside the VS Code extension host (real `vscode` module). Bounded waits, clear messages.
const assert = require('assert');
const path = require('path');
const vscode = require('vscode');

async function waitFor(what, predicate, timeoutMs) {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    const value = await predicate();
    if (value) return value;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
}

exports.run = async function run() {
  if (process.env.CUDICE_PYTHON) {
    await vscode.workspace.getConfiguration().update('cudice.server.pythonPath', process.env.CUDICE_PYTHON, true);
  }
  const folder = vscode.workspace.workspaceFolders[0].uri.fsPath;
  const doc = await vscode.workspace.openTextDocument(path.join(folder, 'relu_broken.py'));
  await vscode.window.showTextDocument(doc);
  const ext = vscode.extensions.getExtension('cudice.cudice');
  const api = await waitFor('the cudice extension to activate', () => ext.isActive && ext.exports, 30000);
  assert.equal(await api.ready, true, 'the language server did not start: see the cudice output channel');
  const commands = await vscode.commands.getCommands(true);
  for (const id of ['cudice.editor.generateKernel', 'cudice.editor.verify', 'cudice.showOutput']) {
    assert.ok(commands.includes(id), `${id} is not registered`);
  }
  await doc.save();
  const diag = await waitFor('a cudice diagnostic on line 14 of relu_broken.py', () =>
    vscode.languages.getDiagnostics(doc.uri).find((d) => d.source === 'cudice' && d.range.start.line === 13), 120000);
  assert.match(diag.message, /vv/);
  console.log(`cudice diagnostic received: ${diag.message}`);
};
