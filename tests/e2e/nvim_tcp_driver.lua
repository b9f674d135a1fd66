-- Headless Neovim driver for test_nvim_tcp.py: the plugin connects to a `cudice-lsp --tcp`
-- server (the remote-GPU-box setup) instead of starting one. Records attach, the first
-- cudice/status and the code actions on `class Model` into CUDICE_OUT.
local out = { errors = {} }
vim.opt.rtp:prepend(assert(os.getenv('CUDICE_PLUGIN')))
vim.opt.swapfile = false
local ok, err = pcall(function()
  local cudice = require('cudice')
  out.setup_ok = cudice.setup({ tcp = assert(os.getenv('CUDICE_TCP')), keymaps = false })
  vim.cmd.edit(vim.fs.joinpath(assert(os.getenv('CUDICE_WORK')), 'relu.py'))
  local buf = vim.api.nvim_get_current_buf()
  local client
  out.attached = vim.wait(60000, function()  -- bounded: a loaded box starts slowly
    client = vim.lsp.get_clients({ bufnr = buf, name = 'cudice' })[1]
    return client ~= nil and client.initialized == true
  end, 50)
  if not out.attached then
    error('no initialized cudice client over TCP after 20 s')
  end
  -- the model state settles once the server has read the settings: loading, then (no model here)
  -- missing; wait past both transient states
  vim.wait(60000, function()
    local s = cudice.statusline()
    return s ~= 'cudice: starting' and not s:find('loading model', 1, true)
  end, 50)
  out.statusline = cudice.statusline()
  local resp = client:request_sync('textDocument/codeAction', {
    textDocument = { uri = vim.uri_from_bufnr(buf) },
    range = { start = { line = 6, character = 8 }, ['end'] = { line = 6, character = 8 } },
    context = { diagnostics = {} },
  }, 10000, buf)
  out.code_action_commands = {}
  for _, a in ipairs(resp and resp.result or {}) do
    table.insert(out.code_action_commands, a.command and a.command.command or vim.NIL)
  end
end)
if not ok then
  table.insert(out.errors, tostring(err))
end
local f = assert(io.open(assert(os.getenv('CUDICE_OUT')), 'w'))
f:write(vim.json.encode(out))
f:close()
vim.cmd('qa!')
