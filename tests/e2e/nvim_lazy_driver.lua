-- Headless Neovim driver for test_nvim_attach_progress.py: the editors/nvim plugin against the real
-- server (scripted model and verifier). Records into CUDICE_OUT:
--   1. a plain Python file never attaches; a reference in a `.cudice` project does, and so does a
--      candidate of another project, to the same single client;
--   2. the model is not loaded until the first generate (statusline "model not loaded");
--   3. :CudiceGenerate shows its progress in the statusline and as LspProgress events.
-- Every wait is bounded; the JSON is always written. Env: CUDICE_PLUGIN, CUDICE_WORK, CUDICE_OUT,
-- CUDICE_PYTHON.
local out = { errors = {}, progress_titles = {}, progress_statuslines = {} }
local work = assert(os.getenv('CUDICE_WORK'))
vim.opt.rtp:prepend(assert(os.getenv('CUDICE_PLUGIN')))
vim.opt.swapfile = false

local common = dofile(vim.fs.joinpath(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)), 'nvim_common.lua'))

local function main()
  local cudice = require('cudice')
  out.setup_ok = cudice.setup({
    python = assert(os.getenv('CUDICE_PYTHON')),
    keymaps = false,
    settings = { model = { path = vim.fs.joinpath(work, 'proj', 'ckpt') } },
  })
  common.on_progress(function(_, v)
    if v.kind == 'begin' then
      table.insert(out.progress_titles, v.title)
    end
  end)
  common.record_statuslines(out.progress_statuslines, 'generating')

  vim.cmd.edit(vim.fs.joinpath(work, 'plain', 'tool.py'))
  local plain = vim.api.nvim_get_current_buf()
  vim.cmd.edit(vim.fs.joinpath(work, 'proj', 'relu.py'))
  local ref = vim.api.nvim_get_current_buf()
  local client
  out.attached = vim.wait(60000, function()
    client = vim.lsp.get_clients({ bufnr = ref, name = 'cudice' })[1]
    return client ~= nil and client.initialized == true
  end, 50)
  if not out.attached then
    error('no initialized cudice client on proj/relu.py after 60 s')
  end
  out.plain_attached = #vim.lsp.get_clients({ bufnr = plain }) > 0
  vim.wait(60000, function() return cudice.statusline():find('model not loaded', 1, true) ~= nil end, 50)
  out.statusline_idle = cudice.statusline()

  for i, line in ipairs(vim.api.nvim_buf_get_lines(ref, 0, -1, false)) do
    if line:match('^class Model') then
      vim.api.nvim_win_set_cursor(0, { i + 1, 4 })
    end
  end
  local target = vim.fs.joinpath(work, 'proj', 'relu_cuda.py')
  vim.cmd('CudiceGenerate')
  out.generated = vim.wait(240000, function() return vim.uv.fs_stat(target) ~= nil end, 100)
  vim.wait(60000, function() return cudice.statusline():find('generating', 1, true) == nil end, 100)
  out.statusline_after = cudice.statusline()

  -- the generated candidate gets its verdict; an unsaved edit marks it "(edited)" at once
  vim.cmd.edit(target)
  local cand = vim.api.nvim_get_current_buf()
  vim.wait(120000, function() return cudice.statusline():find('compiled', 1, true) ~= nil end, 100)
  out.statusline_verdict = cudice.statusline()
  vim.api.nvim_buf_set_lines(cand, -1, -1, false, { '# an edit' })
  vim.wait(60000, function() return cudice.statusline():find('(edited)', 1, true) ~= nil end, 50)
  out.statusline_edited = cudice.statusline()
  local notes = {}
  local notify = vim.notify
  vim.notify = function(msg) table.insert(notes, msg) end
  vim.cmd('CudiceStatus')
  vim.notify = notify
  out.status_note = notes[1] or vim.NIL

  vim.cmd.edit(vim.fs.joinpath(work, 'other', 'k_cuda.py'))
  local other = vim.api.nvim_get_current_buf()
  vim.wait(60000, function() return #vim.lsp.get_clients({ bufnr = other, name = 'cudice' }) > 0 end, 50)
  out.other_attached = #vim.lsp.get_clients({ bufnr = other, name = 'cudice' }) > 0
  out.num_clients = #vim.lsp.get_clients({ name = 'cudice' })
end

xpcall(main, function(err)
  table.insert(out.errors, debug.traceback(tostring(err), 2))
end)
common.finish(out)
