-- The cudice client config for vim.lsp.config: command, file types, root markers, the
-- capabilities Neovim 0.11 lacks by default, and handlers for cudice's server->client messages.
--
-- Handlers: `cudice/status` (model state + last verdict, kept per client for the statusline,
-- announced with a `User CudiceStatus` autocmd) and `workspace/codeLens/refresh` (Neovim 0.11
-- neither advertises nor handles it, so lenses would stay stale after a verification).
--
-- Attachment follows the VS Code extension's activation: a buffer gets cudice when it is a
-- candidate (`*_cuda.py`), carries a `# cudice:` comment in its first 200 lines, is a reference
-- beside its candidate (`relu.py` next to `relu_cuda.py`), or lies under a folder holding a
-- `.cudice` file. Other Python files never start the server. One server serves every project of
-- the Neovim session (as one per VS Code window), whatever their roots.
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

M.ROOT_MARKERS = { '.cudice', 'pyproject.toml', 'setup.py', 'setup.cfg', '.git' }
M.MARKER = '# cudice:'
local MARKER_LINES = 200

--- Whether cudice belongs in `bufnr` (see the header); the reason, or nil.
function M.attach_reason(bufnr)
  local name = vim.api.nvim_buf_get_name(bufnr)
  if name == '' then
    return nil
  end
  if vim.fs.root(bufnr, '.cudice') then
    return '.cudice'
  end
  if name:match('_cuda%.py$') then
    return 'candidate'
  end
  for _, line in ipairs(vim.api.nvim_buf_get_lines(bufnr, 0, MARKER_LINES, false)) do
    if line:find(M.MARKER, 1, true) then
      return 'marker'
    end
  end
  local stem = name:match('^(.*)%.py$')
  if stem and vim.uv.fs_stat(stem .. '_cuda.py') then
    return 'reference'
  end
  return nil
end

--- The workspace folder for `bufnr`: the nearest folder with a root marker, else the file's folder.
function M.root_of(bufnr)
  local name = vim.api.nvim_buf_get_name(bufnr)
  return vim.fs.root(bufnr, M.ROOT_MARKERS) or vim.fs.dirname(name)
end

--- vim.lsp.config's root_dir: attach only where `attach_reason` says so.
function M.root_dir(bufnr, on_dir)
  if M.attach_reason(bufnr) then
    on_dir(M.root_of(bufnr))
  end
end

--- One cudice server for the whole session: the server reads every file by its path, whatever its project.
function M.reuse_client(client, config)
  return client.name == config.name
end

--- Work-done progress of cudice clients, from Neovim's `LspProgress` event (what fidget.nvim and
--- other progress plug-ins read too): per client id, per token, { title, message, percentage }.
M.progress = {}

--- Keep `M.progress` up to date; true when the event was a cudice client's.
function M.on_progress(ev)
  local client = vim.lsp.get_client_by_id(ev.data.client_id)
  local params = ev.data.params or {}
  local value = params.value
  if not client or client.name ~= 'cudice' or type(value) ~= 'table' or params.token == nil then
    return false
  end
  local tokens = M.progress[client.id] or {}
  M.progress[client.id] = tokens
  local key = tostring(params.token)
  if value.kind == 'end' then
    tokens[key] = nil
  else
    local old = tokens[key] or {}
    tokens[key] = {
      title = value.title or old.title or '',
      message = value.message or old.message,
      percentage = value.percentage or old.percentage,
    }
  end
  return true
end

--- The newest running progress of a client other than a verification (the statusline already
--- says "verifying…"), as text: "generating a CUDA kernel for Model: 40 tokens … (12%)", or nil.
function M.progress_text(client_id)
  local shown
  for _, p in pairs(M.progress[client_id] or {}) do
    if not p.title:find('verifying', 1, true) then
      shown = p
    end
  end
  if not shown then
    return nil
  end
  local text = shown.title:gsub('^cudice: ', '')
  if shown.message and shown.message ~= '' then
    text = text .. ': ' .. shown.message
  end
  if shown.percentage then
    text = text .. (' (%d%%)'):format(shown.percentage)
  end
  return text
end

M.handlers = {
  ['cudice/status'] = function(_, result, ctx)
    if type(result) ~= 'table' or type(result.model) ~= 'string' then
      return
    end
    M.status[ctx.client_id] = result
    if type(result.uri) == 'string' then
      M.files[ctx.client_id] = M.files[ctx.client_id] or {}
      local verdict = type(result.lastVerdict) == 'string' and result.lastVerdict or nil
      M.files[ctx.client_id][result.uri] =
        { verdict = verdict, verifying = result.verifying == true, edited = result.edited == true }
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
    root_dir = M.root_dir,
    reuse_client = M.reuse_client,
    capabilities = { workspace = { codeLens = { refreshSupport = true } } },
    handlers = M.handlers,
  }
end

return M
