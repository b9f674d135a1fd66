-- The cudice client config for vim.lsp.config: command, file types, root markers, the
-- capabilities Neovim 0.11 lacks by default, and handlers for cudice's server->client messages.
--
-- Handlers: `cudice/status` (model state + last verdict, kept per client for the statusline,
-- announced with a `User CudiceStatus` autocmd) and `workspace/codeLens/refresh` (Neovim 0.11
-- neither advertises nor handles it, so lenses would stay stale after a verification).
-- Not covered: starting or finding the server (init.lua), settings validation (settings.lua).

local M = {}

--- Latest `cudice/status` payload per client id.
M.status = {}
--- Per client id, per document URI: { verdict = string|nil, verifying = bool } from the statuses
--- that named that URI (the statusline shows the current buffer's own verdict, never another file's).
M.files = {}
--- How many `workspace/codeLens/refresh` requests the server sent (for :CudiceStatus and tests).
M.lens_refreshes = 0

local function refresh_lenses(client_id)
  local client = vim.lsp.get_client_by_id(client_id)
  if not client then
    return
  end
  for bufnr in pairs(client.attached_buffers or {}) do
    if vim.api.nvim_buf_is_loaded(bufnr) then
      vim.lsp.codelens.refresh({ bufnr = bufnr })
    end
  end
end

M.refresh_lenses = refresh_lenses

M.handlers = {
  ['cudice/status'] = function(_, result, ctx)
    if type(result) ~= 'table' or type(result.model) ~= 'string' then
      return
    end
    M.status[ctx.client_id] = result
    if type(result.uri) == 'string' then
      M.files[ctx.client_id] = M.files[ctx.client_id] or {}
      local verdict = type(result.lastVerdict) == 'string' and result.lastVerdict or nil
      M.files[ctx.client_id][result.uri] = { verdict = verdict, verifying = result.verifying == true }
    end
    vim.api.nvim_exec_autocmds('User', { pattern = 'CudiceStatus', data = result, modeline = false })
  end,
  ['workspace/codeLens/refresh'] = function(_, _, ctx)
    M.lens_refreshes = M.lens_refreshes + 1
    vim.schedule(function()
      refresh_lenses(ctx.client_id)
    end)
    return vim.NIL
  end,
}

function M.config()
  return {
    cmd = { 'cudice-lsp' },
    filetypes = { 'python', 'cuda' },
    root_markers = { 'pyproject.toml', 'setup.py', 'setup.cfg', '.git' },
    capabilities = { workspace = { codeLens = { refreshSupport = true } } },
    handlers = M.handlers,
  }
end

return M
