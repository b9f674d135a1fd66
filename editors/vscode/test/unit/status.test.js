'use strict';
require('./stub/register');
const test = require('node:test');
const assert = require('node:assert/strict');
const { renderStatus, StatusBar, isCudiceStatus } = require('../../out/status');

const status = (model, extra = {}) => ({ model, message: '', lastVerdict: null, uri: null, ...extra });

test('each model state has its own text', () => {
  const texts = ['missing', 'idle', 'loading', 'ready', 'error'].map((m) => renderStatus(status(m)).text);
  assert.deepEqual(texts, [
    '$(circle-slash) cudice: no model',
    '$(circle-outline) cudice: model not loaded',
    '$(sync~spin) cudice: loading model',
    '$(check) cudice: ready',
    '$(error) cudice: model error',
  ]);
  assert.equal(new Set(texts).size, 5);
});

test('the last verdict and message appear in text and tooltip', () => {
  const r = renderStatus(status('ready', { message: 'DICE-1.7B on cuda', lastVerdict: 'fast 2.31x', uri: 'file:///a.py' }));
  assert.equal(r.text, '$(check) cudice: ready · fast 2.31x');
  assert.match(r.tooltip, /DICE-1\.7B on cuda/);
  assert.match(r.tooltip, /last verdict: fast 2\.31x \(file:\/\/\/a\.py\)/);
  assert.equal(r.isError, false);
  assert.equal(renderStatus(status('error', { message: 'boom' })).isError, true);
});

test('StatusBar applies updates and ignores malformed payloads', () => {
  const item = { text: '', show() { this.shown = true; } };
  const bar = new StatusBar(item, 'RED');
  assert.equal(item.command, 'cudice.showOutput');
  assert.ok(item.shown);
  assert.equal(bar.update(status('error', { message: 'weights missing' })), true);
  assert.equal(item.text, '$(error) cudice: model error');
  assert.equal(item.backgroundColor, 'RED');
  for (const bad of [null, 42, {}, { model: 'sleepy' }]) {
    assert.equal(isCudiceStatus(bad), false);
    assert.equal(bar.update(bad), false);
  }
  assert.equal(item.text, '$(error) cudice: model error');
  bar.update(status('ready'));
  assert.equal(item.backgroundColor, undefined);
});
