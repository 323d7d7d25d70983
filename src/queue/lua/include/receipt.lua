-- receipt.lua: a delivery's receipt is "<prefix>:<id>": the prefix is random per call
-- and a call delivers an id once, so it names this one delivery.
local function receipt_of(prefix, id)
  return prefix .. ':' .. id
end

-- The id a receipt names, or nil.
local function receipt_id(receipt)
  local at = string.find(receipt, ':', 1, true)
  if not at then
    return nil
  end
  return string.sub(receipt, at + 1)
end
