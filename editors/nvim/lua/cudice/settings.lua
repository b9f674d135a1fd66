-- cudice settings for Neovim: validate what the user passed to setup() against the server's
-- schema (schema.lua, generated from `cudice-lsp --print-schema`) and nest it the way the
-- server reads it ({ model = { path = ... } } under the `cudice` section).
--
-- Accepts flat dotted keys ("cudice.model.path" or "model.path") and nested tables. A bad key
-- or value is reported and dropped (the server then uses its default); nothing here raises.
-- Range checks are left to the server, which warns in its log.

local M = {}

local schema = require('cudice.schema')
local by_key = {}
for _, s in ipairs(schema) do
  by_key[s.key] = s
end

M.schema = schema

--- Defaults of every server key, flat ({ ["cudice.model.path"] = "" , ... }).
function M.defaults()
  local out = {}
  for _, s in ipairs(schema) do
    out[s.key] = s.default
  end
  return out
end

local function flatten(tbl, prefix, out)
  for k, v in pairs(tbl) do
    local key = prefix and (prefix .. '.' .. k) or tostring(k)
    if type(v) == 'table' and not vim.islist(v) then
      flatten(v, key, out)
    else
      out[key] = v
    end
  end
  return out
end

local function type_ok(s, v)
  if s.type == 'integer' then
    return type(v) == 'number' and math.floor(v) == v
  elseif s.type == 'number' then
    return type(v) == 'number'
  end
  return type(v) == s.type
end

--- Flat, validated settings: returns (values, warnings).
function M.validate(user)
  local values, warnings = {}, {}
  for key, v in pairs(flatten(user or {}, nil, {})) do
    local full = key:match('^cudice%.') and key or ('cudice.' .. key)
    local s = by_key[full]
    if not s then
      table.insert(warnings, ('unknown setting %q ignored (known keys: `cudice-lsp --print-schema`)'):format(full))
    elseif not type_ok(s, v) then
      table.insert(warnings, ('setting %s=%s must be %s; using the default %s'):format(
        full, vim.inspect(v), (s.type:match('^[aeiou]') and 'an ' or 'a ') .. s.type, vim.inspect(s.default)))
    elseif s.enum and not vim.tbl_contains(s.enum, v) then
      table.insert(warnings, ('setting %s=%s must be one of %s; using the default %s'):format(
        full, vim.inspect(v), table.concat(s.enum, ', '), vim.inspect(s.default)))
    else
      values[full] = v
    end
  end
  table.sort(warnings)
  return values, warnings
end

--- { ["cudice.model.path"] = x } -> { model = { path = x } } (the `cudice` section's content).
function M.nest(flat)
  local out = {}
  for key, v in pairs(flat) do
    local parts = vim.split(key, '.', { plain = true })
    local node = out
    for i = 2, #parts - 1 do
      node[parts[i]] = node[parts[i]] or {}
      node = node[parts[i]]
    end
    node[parts[#parts]] = v
  end
  return out
end

return M
