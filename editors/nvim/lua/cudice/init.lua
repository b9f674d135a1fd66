-- cudice for Neovim 0.11+: starts the cudice language server through vim.lsp.config /
-- vim.lsp.enable, and adds user commands, key maps, a statusline function and code-lens refresh.
--
--   require('cudice').setup({
--     python = '/path/to/venv/bin/python',   -- or cmd = { 'cudice-lsp' }, or tcp = '127.0.0.1:2087'
--     settings = { model = { path = '/ckpt/DICE-1.7B' } },   -- keys of `cudice-lsp --print-schema`
--   })
--
-- Attachment (lsp.lua): candidates, `# cudice:` markers, references beside their candidate and
-- `.cudice` projects only; a command run in another buffer attaches it first. The model loads on
-- the first generate or infill (`cudice.model.loadOnStart` is false unless set).
-- Progress: the server's work-done progress arrives as Neovim's `LspProgress` event (progress
-- plug-ins such as fidget.nvim show it); statusline() shows generation and model-load progress.
-- Not covered: installing the server (pip), completion/hover UI (Neovim's own).

local lsp = require('cudice.lsp')
local settings = require('cudice.settings')

local M = {}

--- Why the last setup() failed (for :checkhealth cudice), or nil.
M.setup_error = nil

local NAME = 'cudice'
local INSTALL_HINT = 'Install it with `pip install cudice` (or `pip install -e .` in a cudice checkout), then '
  .. "pass setup({ python = '/path/to/python' }) or setup({ cmd = { '/path/to/cudice-lsp' } })."

local function notify(msg, level)
  vim.notify('cudice: ' .. msg, level or vim.log.levels.INFO)
end

--- The server command from the options; (cmd, nil) or (nil, message saying what to fix).
function M.resolve_cmd(opts)
  if opts.tcp then
    local host, port = tostring(opts.tcp):match('^%[?([^%]]+)%]?:(%d+)$')
    port = tonumber(port)
    if not host or not port or port < 1 or port > 65535 then
      return nil, ('tcp = %q is not host:port; use e.g. "127.0.0.1:2087" (where `cudice-lsp --tcp` listens)')
        :format(tostring(opts.tcp))
    end
    return vim.lsp.rpc.connect(host, port), nil
  end
  if opts.cmd then
    if type(opts.cmd) == 'table' and vim.fn.executable(opts.cmd[1]) == 0 then
      return nil, ('language server not found: %s is not executable. %s'):format(opts.cmd[1], INSTALL_HINT)
    end
    return opts.cmd, nil
  end
  if opts.python then
    if vim.fn.executable(opts.python) == 0 then
      return nil, ('python = %q is not executable. %s'):format(opts.python, INSTALL_HINT)
    end
    local probe = vim.system({ opts.python, '-c', 'import cudice.server' }, { text = true }):wait(30000)
    if probe.code ~= 0 then
      return nil, ('cudice is not installed for %s. %s'):format(opts.python, INSTALL_HINT)
    end
    return { opts.python, '-m', 'cudice.server' }, nil
  end
  if vim.fn.executable('cudice-lsp') == 0 then
    return nil, 'language server not found: `cudice-lsp` is not on PATH. ' .. INSTALL_HINT
  end
  return { 'cudice-lsp' }, nil
end

local function client_for(bufnr)
  return vim.lsp.get_clients({ bufnr = bufnr, name = NAME })[1]
end

local ATTACH_TIMEOUT_MS = 60000

--- Attach cudice to `bufnr` although the attach rules (lsp.lua) did not pick it (a reference
--- with no candidate yet), then call `then_(client)` once the client is initialized.
local function attach_then(bufnr, then_)
  if not vim.lsp.config[NAME] or not vim.lsp.is_enabled(NAME) then
    notify('the language server is not set up: call require("cudice").setup() (see :checkhealth cudice)',
      vim.log.levels.WARN)
    return false
  end
  local config = vim.tbl_extend('force', vim.deepcopy(vim.lsp.config[NAME]), { root_dir = lsp.root_of(bufnr) })
  local id = vim.lsp.start(config, { bufnr = bufnr })
  local client = id and vim.lsp.get_client_by_id(id)
  if not client then
    notify('the language server did not start (see :checkhealth cudice)', vim.log.levels.ERROR)
    return false
  end
  local waited = 0
  local function poll()
    if client.initialized then
      then_(client)
    elseif waited < ATTACH_TIMEOUT_MS and not client:is_stopped() then
      waited = waited + 100
      vim.defer_fn(poll, 100)
    else
      notify('the language server did not finish starting', vim.log.levels.ERROR)
    end
  end
  poll()
  return true
end

--- Send workspace/executeCommand to the buffer's cudice client (attaching the buffer if needed).
function M.execute(command, arguments, bufnr)
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  local function send(client)
    client:request('workspace/executeCommand', { command = command, arguments = arguments }, function(err)
      if err then
        notify(('%s failed: %s'):format(command, err.message or vim.inspect(err)), vim.log.levels.ERROR)
      end
    end, bufnr)
  end
  local client = client_for(bufnr)
  if client then
    send(client)
    return true
  end
  return attach_then(bufnr, send)
end

local function cursor_position()
  local row, col = unpack(vim.api.nvim_win_get_cursor(0))
  return { line = row - 1, character = col }
end

--- LSP range of lines line1..line2 (1-based, inclusive) of the current buffer.
function M.line_range(line1, line2)
  local last = vim.api.nvim_buf_get_lines(0, line2 - 1, line2, false)[1] or ''
  return { start = { line = line1 - 1, character = 0 }, ['end'] = { line = line2 - 1, character = #last } }
end

--- Statusline text for the current buffer: '' when cudice is not attached. The verdict shown is
--- this buffer's own (or "verifying…"), never that of the file verified last.
function M.statusline()
  local bufnr = vim.api.nvim_get_current_buf()
  local client = client_for(bufnr)
  if not client then
    return ''
  end
  local s = lsp.status[client.id]
  if not s then
    return 'cudice: starting'
  end
  local labels = {
    missing = 'no model', idle = 'model not loaded', loading = 'loading model', ready = 'ready', error = 'model error',
  }
  local text = 'cudice: ' .. (labels[s.model] or s.model)
  local file = (lsp.files[client.id] or {})[vim.uri_from_bufnr(bufnr)]
  if file and file.verifying then
    text = text .. ' · verifying…'
  elseif file and file.verdict and file.verdict ~= '' then
    text = text .. ' · ' .. file.verdict .. (file.edited and ' (edited)' or '')
  end
  local progress = lsp.progress_text(client.id)
  if progress then
    text = text .. ' · ' .. progress
  end
  return text
end

local function uri()
  return vim.uri_from_bufnr(0)
end

M.commands = {
  CudiceGenerate = { desc = 'cudice: generate a ModelNew for the Model under the cursor',
    run = function() return M.execute('cudice.generateKernel', { uri(), cursor_position() }) end },
  CudiceInfill = { desc = 'cudice: infill the kernel body in the line range', range = true,
    run = function(o) return M.execute('cudice.infillKernel', { uri(), M.line_range(o.line1, o.line2) }) end },
  CudiceVerify = { desc = 'cudice: verify this file',
    run = function() return M.execute('cudice.verify', { uri() }) end },
  CudiceReloadModel = { desc = 'cudice: reload the model',
    run = function() return M.execute('cudice.reloadModel', {}) end },
  CudiceCancel = { desc = "cudice: cancel this file's running jobs",
    run = function() return M.execute('cudice.cancel', { uri() }) end },
  CudiceStatus = { desc = 'cudice: show the model state and the last verdict',
    run = function()
      local client = client_for(0)
      local s = client and lsp.status[client.id]
      local line = M.statusline():gsub('^cudice: ', '')
      notify(s and (line .. (s.message ~= '' and (' — ' .. s.message) or '')) or 'not attached to this buffer')
    end },
}

M.keymaps = {
  { 'n', '<leader>kg', '<cmd>CudiceGenerate<cr>', 'cudice: generate kernel' },
  { 'x', '<leader>ki', ':CudiceInfill<cr>', 'cudice: infill kernel body' },
  { 'n', '<leader>kv', '<cmd>CudiceVerify<cr>', 'cudice: verify file' },
  { 'n', '<leader>kr', '<cmd>CudiceReloadModel<cr>', 'cudice: reload model' },
  { 'n', '<leader>kl', vim.lsp.codelens.run, 'cudice: run code lens' },
}

local function on_attach(bufnr, keymaps)
  lsp.refresh_lenses(client_for(bufnr).id)
  if keymaps then
    for _, m in ipairs(M.keymaps) do
      vim.keymap.set(m[1], m[2], m[3], { buffer = bufnr, desc = m[4], silent = true })
    end
  end
end

--- Configure and enable the cudice client. Returns true when the server was enabled.
function M.setup(opts)
  opts = opts or {}
  local cmd, problem = M.resolve_cmd(opts)
  M.setup_error = problem
  if not cmd then
    notify(problem, vim.log.levels.ERROR)
    return false
  end
  local flat, warnings = settings.validate(opts.settings)
  for _, w in ipairs(warnings) do
    notify(w, vim.log.levels.WARN)
  end
  if flat['cudice.model.loadOnStart'] == nil then -- the model loads on the first generate
    flat['cudice.model.loadOnStart'] = false
  end
  -- An empty Lua table is encoded as a JSON array; the server expects an object.
  local section = next(flat) and settings.nest(flat) or vim.empty_dict()
  local config = { cmd = cmd, init_options = { cudice = section }, settings = { cudice = section } }
  if opts.filetypes then
    config.filetypes = opts.filetypes
  end
  vim.lsp.config(NAME, vim.tbl_deep_extend('force', lsp.config(), config))

  for name, c in pairs(M.commands) do
    vim.api.nvim_create_user_command(name, c.run, { desc = c.desc, range = c.range })
  end
  local group = vim.api.nvim_create_augroup('cudice', { clear = true })
  vim.api.nvim_create_autocmd('LspAttach', {
    group = group,
    callback = function(ev)
      local client = vim.lsp.get_client_by_id(ev.data.client_id)
      if client and client.name == NAME then
        on_attach(ev.buf, opts.keymaps ~= false)
      end
    end,
  })
  vim.api.nvim_create_autocmd('LspProgress', {
    group = group,
    callback = function(ev)
      if lsp.on_progress(ev) then
        vim.api.nvim_exec_autocmds('User', { pattern = 'CudiceStatus', modeline = false })
      end
    end,
  })
  vim.api.nvim_create_autocmd('BufWritePost', {
    group = group,
    callback = function(ev)
      if client_for(ev.buf) then
        vim.lsp.codelens.refresh({ bufnr = ev.buf })
      end
    end,
  })
  vim.lsp.enable(NAME)
  return true
end

return M
