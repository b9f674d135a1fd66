-- Picked up by vim.lsp.config('cudice') when editors/nvim is on 'runtimepath'
-- (`vim.lsp.enable('cudice')` alone then starts `cudice-lsp`). require('cudice').setup()
-- adds the user commands, key maps, settings and code-lens refresh on top.
return require('cudice.lsp').config()
