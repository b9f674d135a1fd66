'use strict';
require('./stub/register');
const test = require('node:test');
const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const { probeServer } = require('../../out/probe');
const { planLaunch } = require('../../out/launch');

const none = { path: '', pythonPath: '', tcp: '' };
const fakeExec = (result) => {
  const calls = [];
  const exec = (cmd, args, cb) => {
    calls.push([cmd, ...args]);
    cb(result.error ?? null, result.stdout ?? '', result.stderr ?? '');
  };
  return { exec, calls };
};

test('a working server passes and is asked for its schema', async () => {
  const { exec, calls } = fakeExec({ stdout: '{"properties": {"cudice.model.path": {}}}' });
  assert.equal(await probeServer(planLaunch({ ...none, pythonPath: 'py' }), exec), undefined);
  assert.deepEqual(calls, [['py', '-m', 'cudice.server', '--print-schema']]);
});

test('cudice-lsp missing from PATH -> says so and how to install', async () => {
  const err = Object.assign(new Error('spawn cudice-lsp ENOENT'), { code: 'ENOENT' });
  const msg = await probeServer(planLaunch(none), fakeExec({ error: err }).exec);
  assert.match(msg, /not found: `cudice-lsp` is not on PATH/);
  assert.match(msg, /pip install cudice/);
  assert.match(msg, /cudice\.server\.pythonPath/);
});

test('python without cudice -> names the interpreter', async () => {
  const err = Object.assign(new Error('exit 1'), { code: 1 });
  const stderr = '/usr/bin/python3: Error while finding module specification for \'cudice.server\' (ModuleNotFoundError: No module named \'cudice\')';
  const msg = await probeServer(planLaunch({ ...none, pythonPath: '/usr/bin/python3' }), fakeExec({ error: err, stderr }).exec);
  assert.match(msg, /cudice is not installed for \/usr\/bin\/python3/);
});

test('a program that is not cudice -> could not start, with its output', async () => {
  const msg = await probeServer(planLaunch({ ...none, path: '/bin/true' }), fakeExec({ stdout: '' }).exec);
  assert.match(msg, /could not start: \/bin\/true failed/);
});

test('tcp plans are not probed', async () => {
  const { exec, calls } = fakeExec({});
  assert.equal(await probeServer({ kind: 'tcp', host: 'h', port: 1 }, exec), undefined);
  assert.equal(calls.length, 0);
});

test('real exec: a missing executable path is reported as missing', async () => {
  const msg = await probeServer(planLaunch({ ...none, path: '/nonexistent/cudice-lsp' }));
  assert.match(msg, /not found: \/nonexistent\/cudice-lsp does not exist/);
});

const python = process.env.CUDICE_TEST_PYTHON || 'python3';
const hasCudice = spawnSync(python, ['-c', 'import cudice.server']).status === 0;
test('real exec: the installed server passes the probe', { skip: !hasCudice && `${python} has no cudice` }, async () => {
  assert.equal(await probeServer(planLaunch({ ...none, pythonPath: python })), undefined);
});
