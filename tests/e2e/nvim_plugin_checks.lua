-- Checks of the editors/nvim plugin that need no server, run by test_nvim_plugin.py.
-- Writes one JSON object to CUDICE_OUT and quits; the Python test asserts on it.
local out = { notes = {} }
vim.opt.rtp:prepend(assert(os.getenv('CUDICE_PLUGIN')))

local notified = {}
vim.notify = function(msg, level)
  table.insert(notified, { msg = msg, level = level })
end

local ok, err = pcall(function()
  -- lsp/cudice.lua is found on 'runtimepath' without setup().
  local base = vim.lsp.config.cudice
  out.base = { cmd = base.cmd, filetypes = base.filetypes,
    refresh = vim.tbl_get(base, 'capabilities', 'workspace', 'codeLens', 'refreshSupport') }

  local settings = require('cudice.settings')
  local values, warnings = settings.validate({
    ['cudice.model.path'] = '/ckpt',
    sampler = { topK = 5, strategy = 'bogus', temperature = 'hot', maxNewTokens = 1.5 },
    ['verify.onSave'] = false,
    modle = { path = 'typo' },
  })
  out.validated = { values = values, warnings = warnings }
  out.nested = settings.nest(values)
  out.defaults = settings.defaults()
  out.schema = settings.schema

  local cudice = require('cudice')
  local _, tcp_err = cudice.resolve_cmd({ tcp = 'gpu-box' })
  local _, cmd_err = cudice.resolve_cmd({ cmd = { '/nonexistent/cudice-lsp' } })
  local _, py_err = cudice.resolve_cmd({ python = '/nonexistent/python3' })
  out.resolve = { tcp = tcp_err, cmd = cmd_err, python = py_err,
    tcp_ok = type(cudice.resolve_cmd({ tcp = '127.0.0.1:2087' })) }

  out.setup_missing = cudice.setup({ cmd = { '/nonexistent/cudice-lsp' } })
  out.notified_missing = vim.deepcopy(notified)
  out.enabled_after_missing = vim.lsp.is_enabled and vim.lsp.is_enabled('cudice') or vim.NIL
  vim.cmd('checkhealth cudice')
  out.health_after_missing = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\n')
  vim.cmd('enew!')

  notified = {}
  out.setup_ok = cudice.setup({
    cmd = { 'sh', '-c', 'exit 0' },
    settings = { model = { path = '/ckpt' }, ['cudice.logLevel'] = 'debug', bogus = 1 },
  })
  out.notified_ok = notified
  local cfg = vim.lsp.config.cudice
  out.config = { cmd = cfg.cmd, init_options = cfg.init_options, settings = cfg.settings,
    refresh = vim.tbl_get(cfg, 'capabilities', 'workspace', 'codeLens', 'refreshSupport'),
    handlers = vim.tbl_keys(cfg.handlers or {}) }
  out.commands = {}
  for name, c in pairs(vim.api.nvim_get_commands({})) do
    if name:match('^Cudice') then
      out.commands[name] = { range = c.range }
    end
  end

  -- The cudice/status handler stores the payload and announces it.
  local seen
  vim.api.nvim_create_autocmd('User', { pattern = 'CudiceStatus', callback = function(ev) seen = ev.data end })
  local lsp = require('cudice.lsp')
  lsp.handlers['cudice/status'](nil, { model = 'ready', message = 'm', lastVerdict = 'fast 2.0x', uri = vim.NIL },
    { client_id = 7 })
  lsp.handlers['cudice/status'](nil, 'garbage', { client_id = 8 })
  out.status = { stored = lsp.status[7], ignored = lsp.status[8] == nil, autocmd = seen }
  out.refresh_reply = lsp.handlers['workspace/codeLens/refresh'](nil, nil, { client_id = 99 }) == vim.NIL

  vim.cmd('checkhealth cudice')
  out.health = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\n')
  vim.cmd('enew!')

  vim.api.nvim_buf_set_lines(0, 0, -1, false, { 'a', 'bcd', 'efghi' })
  out.line_range = cudice.line_range(2, 3)
  out.statusline_detached = cudice.statusline()

  -- Attach rules: as VS Code activates (lsp.lua's header).
  local dir = assert(os.getenv('CUDICE_TMP'))
  local function reason(rel, lines)
    local path = vim.fs.joinpath(dir, rel)
    vim.fn.mkdir(vim.fs.dirname(path), 'p')
    vim.fn.writefile(lines or { 'import torch' }, path)
    vim.cmd.edit(path)
    return lsp.attach_reason(0) or 'none'
  end
  vim.fn.writefile({ '' }, vim.fs.joinpath(dir, 'proj', '.cudice'), 'p')
  vim.fn.mkdir(vim.fs.joinpath(dir, 'proj'), 'p')
  vim.fn.writefile({ '' }, vim.fs.joinpath(dir, 'proj', '.cudice'))
  out.attach = {
    plain = reason('plain/tool.py'),
    candidate = reason('plain/relu_cuda.py'),
    reference = reason('plain/relu.py'),
    marker = reason('plain/mine.py', { 'import torch', '# cudice: reference=relu.py' }),
    project = reason('proj/sub/anything.py'),
  }
  vim.cmd('enew!')

  -- Progress (Neovim's LspProgress event, as progress plug-ins see it) reaches the statusline.
  local fake = { id = 4242, name = 'cudice' }
  local real_get = vim.lsp.get_client_by_id
  vim.lsp.get_client_by_id = function(id) return id == 4242 and fake or real_get(id) end
  local function progress(token, value)
    return lsp.on_progress({ data = { client_id = 4242, params = { token = token, value = value } } })
  end
  out.progress = {
    took = progress('g', { kind = 'begin', title = 'cudice: generating a CUDA kernel for Model', percentage = 0 }),
  }
  progress('v', { kind = 'begin', title = 'cudice: verifying relu_cuda.py' })
  progress('g', { kind = 'report', message = '40 tokens · 5.0 tok/s', percentage = 12 })
  out.progress.during = lsp.progress_text(4242)
  progress('g', { kind = 'end', message = 'done' })
  out.progress.after = lsp.progress_text(4242) or vim.NIL
  vim.lsp.get_client_by_id = real_get

  -- No settings: the server must get an empty object, not the `[]` Lua's `{}` encodes to
  -- (the config is reset first: vim.lsp.config merges into what the setup() above left).
  vim.lsp.config.cudice = {}
  cudice.setup({ cmd = { 'sh', '-c', 'exit 0' } })
  out.empty_settings_json = vim.json.encode({ init_options = vim.lsp.config.cudice.init_options,
    settings = vim.lsp.config.cudice.settings })
end)
out.ok = ok
out.error = ok and vim.NIL or tostring(err)
local f = assert(io.open(assert(os.getenv('CUDICE_OUT')), 'w'))
f:write(vim.json.encode(out))
f:close()
vim.cmd('qa!')
