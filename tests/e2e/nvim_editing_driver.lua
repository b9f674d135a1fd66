-- Headless Neovim driver for test_nvim_editing.py: the editors/nvim plugin against the real
-- server (scripted model and verifier, lsp_fakes) through what a user types. Records into
-- CUDICE_OUT:
--   a. a saved candidate overwritten so it has no ModelNew: `:w` (a_cuda.py) and
--      `:noautocmd write` + `:CudiceVerify` (b_cuda.py) clear its statusline verdict and diagnostics;
--   b. `:CudiceGenerate` on a reference with a syntax error: the messages shown (Neovim echoes a
--      server's window/showMessage into `:messages`) and the vim.notify calls;
--   c. `:'<,'>CudiceInfill` over whole lines from the `__global__` signature to the kernel's `}`:
--      the buffer after the infill, and the statuslines shown while it ran;
--   d. `:bdelete` of a buffer whose verification runs (`SLOW_VERIFY`: the scripted verifier sleeps
--      300 s): the verification worker's pid (from CUDICE_FAKE_VERIFY_LOG), whether it is gone, and
--      how the work-done progress ended;
--   e. `:edit` (a reload: didClose + didOpen) of a buffer whose verification runs (`VERIFY_DELAY`):
--      the statusline once a verdict came, and how each of its verifications ended.
-- setup() passes sampler.maxNewTokens = 0 (a type-valid value the server rejects at `initialize`,
-- so its warning is logged before `initialized`); the log level is INFO, so lsp.log (under
-- XDG_STATE_HOME) shows at which level each server line arrived (test point 4).
-- Every wait is bounded; the JSON is always written, with `errors[point]` for a point that failed
-- (the other points still run). Env: CUDICE_PLUGIN, CUDICE_WORK, CUDICE_OUT,
-- CUDICE_PYTHON, CUDICE_FAKE_VERIFY_LOG.
local out = { errors = vim.empty_dict(), notes = {}, progress = {}, infill_statuslines = {} }
local work = assert(os.getenv('CUDICE_WORK'))
local proj = vim.fs.joinpath(work, 'proj')
vim.opt.rtp:prepend(assert(os.getenv('CUDICE_PLUGIN')))
vim.opt.swapfile = false
vim.lsp.log.set_level(vim.log.levels.INFO)

local common = dofile(vim.fs.joinpath(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)), 'nvim_common.lua'))
local wait = common.wait

local function diag_codes(bufnr)
  local codes = {}
  for _, d in ipairs(vim.diagnostic.get(bufnr)) do
    table.insert(codes, tostring(d.code))
  end
  return codes
end

local function open(name)
  vim.cmd.edit(vim.fs.joinpath(proj, name))
  local bufnr = vim.api.nvim_get_current_buf()
  wait(60000, 'an initialized cudice client on ' .. name, function()
    local c = vim.lsp.get_clients({ bufnr = bufnr, name = 'cudice' })[1]
    return c ~= nil and c.initialized == true
  end)
  return bufnr
end

--- The statusline of `bufnr` (made current) once `cond(statusline)` holds.
local function statusline_when(bufnr, what, cond, ms)
  local cudice = require('cudice')
  vim.api.nvim_set_current_buf(bufnr)
  wait(ms or 60000, what, function() return cond(cudice.statusline()) end)
  return cudice.statusline()
end

--- The message history (`:messages`: where Neovim echoes a server's window/showMessage), by line.
local function messages()
  return vim.split(vim.api.nvim_exec2('messages', { output = true }).output, '\n', { trimempty = true })
end

local NO_MODEL_NEW = { 'import torch', '', 'print(torch.ones(2))' }

-- a: saved, verified, then overwritten so it is no candidate any more
local function overwritten(name, write)
  local bufnr = open(name)
  vim.cmd.write()
  local rec = {}
  rec.verdict = statusline_when(bufnr, name .. "'s verdict", function(s) return s:find('compiled', 1, true) ~= nil end)
  wait(60000, name .. "'s diagnostics", function() return #vim.diagnostic.get(bufnr) > 0 end)
  rec.codes_before = diag_codes(bufnr)
  vim.api.nvim_buf_set_lines(bufnr, 0, -1, false, NO_MODEL_NEW)
  write()
  rec.cleared = vim.wait(60000, function()
    return #vim.diagnostic.get(bufnr) == 0 and not require('cudice').statusline():find(' · ', 1, true)
  end, 50)
  rec.statusline_after = require('cudice').statusline()
  rec.codes_after = diag_codes(bufnr)
  return rec
end

local function setup()
  local cudice = require('cudice')
  vim.notify = function(msg, level) -- kept, not shown, for the whole session
    table.insert(out.notes, { msg = tostring(msg), level = level or vim.NIL })
  end
  out.setup_ok = cudice.setup({
    python = assert(os.getenv('CUDICE_PYTHON')),
    keymaps = false,
    settings = { model = { path = vim.fs.joinpath(proj, 'ckpt') }, sampler = { maxNewTokens = 0 } },
  })
  common.on_progress(function(token, v)
    if v.kind == 'begin' then
      out.progress[token] = { title = v.title }
    elseif v.kind == 'end' and out.progress[token] then
      out.progress[token].end_message = v.message or ''
    end
  end)
  common.record_statuslines(out.infill_statuslines, 'infilling')
end

local steps = {}

steps.a = function()
  out.a_save = overwritten('a_cuda.py', function() vim.cmd.write() end)
  out.a_verify = overwritten('b_cuda.py', function()
    vim.cmd('noautocmd write') -- on disk, but no didSave: only :CudiceVerify tells the server
    vim.cmd('CudiceVerify')
  end)
end

steps.b = function()
  local ref = open('broken.py')
  wait(60000, "broken.py's syntax diagnostic", function() return #vim.diagnostic.get(ref) > 0 end)
  out.b_codes = diag_codes(ref)
  for i, line in ipairs(vim.api.nvim_buf_get_lines(ref, 0, -1, false)) do
    if line:match('^class Model') then
      vim.api.nvim_win_set_cursor(0, { i + 1, 4 })
    end
  end
  local num_notes, num_messages = #out.notes, #messages()
  vim.cmd('CudiceGenerate')
  wait(60000, 'a message after :CudiceGenerate', function() return #messages() > num_messages end)
  out.b_messages = vim.list_slice(messages(), num_messages + 1)
  out.b_notes = vim.list_slice(out.notes, num_notes + 1)
  out.b_generated = vim.uv.fs_stat(vim.fs.joinpath(proj, 'broken_cuda.py')) ~= nil
end

steps.c = function()
  local cand = open('c_cuda.py')
  local lines = vim.api.nvim_buf_get_lines(cand, 0, -1, false)
  local first, last
  for i, line in ipairs(lines) do
    if not first and line:find('__global__', 1, true) then
      first = i
    elseif first and not last and line == '}' then
      last = i
    end
  end
  out.c_signature = lines[first]
  vim.api.nvim_buf_set_mark(cand, '<', first, 0, {})
  vim.api.nvim_buf_set_mark(cand, '>', last, #lines[last], {})
  vim.cmd("'<,'>CudiceInfill")
  out.c_done = vim.wait(240000, function()
    return table.concat(vim.api.nvim_buf_get_lines(cand, 0, -1, false), '\n'):find('written by the fake engine', 1, true)
      ~= nil
  end, 100)
  out.c_after = vim.api.nvim_buf_get_lines(cand, 0, -1, false)
end

steps.d = function()
  local log = assert(os.getenv('CUDICE_FAKE_VERIFY_LOG'))
  local slow = open('slow_cuda.py')
  local slow_uri = vim.uri_from_bufnr(slow)
  local function runs()
    return vim.uv.fs_stat(log) and vim.fn.readfile(log) or {}
  end
  local num_runs = #runs()
  vim.cmd.write()
  statusline_when(slow, "slow_cuda.py's verification", function(s) return s:find('verifying', 1, true) ~= nil end)
  local pid
  wait(60000, 'the scripted verifier to log the run of slow_cuda.py', function()
    local logged = runs()
    pid = #logged > num_runs and vim.json.decode(logged[#logged]).pid or nil
    return pid ~= nil
  end)
  out.d_pid = pid
  local function alive()
    local stat = io.open('/proc/' .. pid .. '/stat')
    if not stat then
      return false
    end
    local state = stat:read('*a'):match('%) (%a)')
    stat:close()
    return state ~= 'Z'
  end
  out.d_alive_before = alive()
  local client = vim.lsp.get_clients({ bufnr = slow, name = 'cudice' })[1]
  vim.cmd('bdelete ' .. slow)
  out.d_gone = vim.wait(60000, function() return not alive() end, 100)
  local function verify_ends()
    local ends = {}
    for _, p in pairs(out.progress) do
      if p.title:find('verifying', 1, true) and p.title:find('slow_cuda.py', 1, true) and p.end_message then
        table.insert(ends, p.end_message)
      end
    end
    return ends
  end
  vim.wait(60000, function() return #verify_ends() > 0 end, 100)
  out.d_progress_ends = verify_ends()
  local files = require('cudice.lsp').files[client.id]
  vim.wait(60000, function() return files[slow_uri] ~= nil and files[slow_uri].verifying == false end, 100)
  out.d_verifying_after = files[slow_uri] and files[slow_uri].verifying
end

steps.e = function()
  local delayed = open('e_cuda.py')
  vim.cmd.write()
  statusline_when(delayed, "e_cuda.py's verification", function(s) return s:find('verifying', 1, true) ~= nil end)
  vim.cmd.edit() -- reloads the unmodified buffer: Neovim sends didClose, then didOpen
  out.e_same_buffer = vim.api.nvim_get_current_buf() == delayed
  out.e_statusline = statusline_when(delayed, "e_cuda.py's verdict after the reload", function(s)
    return s:find('compiled', 1, true) ~= nil
  end)
  out.e_progress_ends = {}
  for _, p in pairs(out.progress) do
    if p.title == 'cudice: verifying e_cuda.py' then
      table.insert(out.e_progress_ends, p.end_message or 'running')
    end
  end
  table.sort(out.e_progress_ends)
end

-- each point on its own: one that fails records why (`errors[point]`) and the next ones still run
local ok, err = xpcall(setup, debug.traceback)
if ok then
  for _, point in ipairs({ 'a', 'b', 'c', 'd', 'e' }) do
    local done, why = xpcall(steps[point], debug.traceback)
    if not done then
      out.errors[point] = why
    end
  end
else
  out.errors.setup = err
end
common.finish(out)
