-- Helpers shared by the headless Neovim drivers of tests/e2e (nvim_driver.lua,
-- nvim_editing_driver.lua, nvim_lazy_driver.lua). Not a driver: a driver loads it from its own
-- folder (run_lua in nvim_tools.py runs it with `luafile <absolute path>`):
--   local common = dofile(vim.fs.joinpath(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)), 'nvim_common.lua'))
local M = {}

--- Write `out` as JSON to CUDICE_OUT (what the pytest wrapper reads) and quit Neovim.
function M.finish(out)
  local f = assert(io.open(assert(os.getenv('CUDICE_OUT')), 'w'))
  f:write(vim.json.encode(out))
  f:close()
  vim.cmd('qa!')
end

--- Wait up to `ms` for `cond()`, polling every 50 ms; raise an error naming `what` on a timeout.
function M.wait(ms, what, cond)
  if not vim.wait(ms, cond, 50) then
    error(('timed out after %d s waiting for %s'):format(ms / 1000, what))
  end
end

--- Call `on_value(token, value)` for each LspProgress event whose value is a table
--- (`begin`/`report`/`end`); `token` is the progress token as a string.
function M.on_progress(on_value)
  vim.api.nvim_create_autocmd('LspProgress', {
    callback = function(ev)
      local params = ev.data.params
      if type(params.value) == 'table' then
        on_value(tostring(params.token), params.value)
      end
    end,
  })
end

--- Append to `list` the statusline shown at each CudiceStatus event when it contains `text`.
function M.record_statuslines(list, text)
  vim.api.nvim_create_autocmd('User', {
    pattern = 'CudiceStatus',
    callback = function()
      local s = require('cudice').statusline()
      if s:find(text, 1, true) then
        table.insert(list, s)
      end
    end,
  })
end

return M
