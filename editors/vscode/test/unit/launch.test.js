'use strict';
require('./stub/register');
const test = require('node:test');
const assert = require('node:assert/strict');
const { planLaunch, parseHostPort, LaunchError, describePlan } = require('../../out/launch');

const none = { path: '', pythonPath: '', tcp: '' };

test('defaults to cudice-lsp from PATH', () => {
  assert.deepEqual(planLaunch(none), { kind: 'exec', command: 'cudice-lsp', args: [], via: 'PATH' });
});

test('pythonPath starts `python -m cudice.server`', () => {
  const plan = planLaunch({ ...none, pythonPath: ' /opt/venv/bin/python ' });
  assert.deepEqual(plan, { kind: 'exec', command: '/opt/venv/bin/python', args: ['-m', 'cudice.server'], via: 'pythonPath' });
  assert.equal(describePlan(plan), '/opt/venv/bin/python -m cudice.server');
});

test('an executable path wins over pythonPath', () => {
  const plan = planLaunch({ ...none, path: '/usr/local/bin/cudice-lsp', pythonPath: '/usr/bin/python3' });
  assert.deepEqual(plan, { kind: 'exec', command: '/usr/local/bin/cudice-lsp', args: [], via: 'path' });
});

test('tcp wins over everything and is parsed', () => {
  const plan = planLaunch({ path: '/x', pythonPath: '/y', tcp: 'gpu-box:2087' });
  assert.deepEqual(plan, { kind: 'tcp', host: 'gpu-box', port: 2087 });
  assert.deepEqual(parseHostPort('[::1]:9000'), { host: '::1', port: 9000 });
});

test('bad tcp values name the setting, the rule and the fix', () => {
  for (const bad of ['localhost', 'host:0', 'host:70000', ':2087', 'a b:1']) {
    assert.throws(() => planLaunch({ ...none, tcp: bad }), (err) => {
      assert.ok(err instanceof LaunchError, `${bad}: ${err}`);
      assert.match(err.message, /cudice\.server\.tcp/);
      assert.match(err.message, /host:port/);
      assert.match(err.message, /127\.0\.0\.1:2087/);
      return true;
    });
  }
});
