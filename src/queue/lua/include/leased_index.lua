-- leased_index.lua: the Subscribe deliveries by tag, in the leased zset.
--- @include "keys"
--- @include "load"
-- The lex range of a tag's entries. Tags hold no control characters, so "\1" ends the
-- range before any longer tag's entries begin.
local function tag_range(tag)
  return '[' .. tag .. '\0', '(' .. tag .. '\1'
end

-- A Subscribe delivery's entry.
local function leased_entry(tag, id)
  return tag .. '\0' .. id
end

-- Calls visit(entry, id, meta) for each delivery indexed under tag (meta nil when the
-- task is gone).
local function each_leased(tag, visit)
  for _, entry in ipairs(redis.call('ZRANGEBYLEX', leased, tag_range(tag))) do
    local id = string.sub(entry, #tag + 2)
    visit(entry, id, load(id))
  end
end
