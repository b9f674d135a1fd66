'use strict';
require('./stub/register');
const test = require('node:test');
const assert = require('node:assert/strict');
const { nestedSection, serverKeys } = require('../../out/settings');
const pkg = require('../../package.json');
const clientOnly = Object.keys(require('../../client-settings.json').properties);

test('server keys are the contributed keys minus the client-only ones', () => {
  const keys = serverKeys(pkg, clientOnly);
  assert.ok(keys.includes('cudice.model.path'));
  assert.ok(keys.includes('cudice.sampler.topK'));
  for (const k of clientOnly) assert.ok(!keys.includes(k), k);
  assert.equal(keys.length + clientOnly.length, Object.keys(pkg.contributes.configuration.properties).length);
});

test('nestedSection builds the object under the cudice section', () => {
  const values = { 'cudice.model.path': '/ckpt', 'cudice.sampler.topK': 5, 'cudice.logLevel': 'debug' };
  const out = nestedSection(['cudice.model.path', 'cudice.sampler.topK', 'cudice.logLevel', 'cudice.model.dtype'],
    (k) => values[k]);
  assert.deepEqual(out, { model: { path: '/ckpt' }, sampler: { topK: 5 }, logLevel: 'debug' });
});
