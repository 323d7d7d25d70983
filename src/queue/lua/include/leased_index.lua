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

-- Calls visit(entry, id, meta) for the deliveries indexed under tag (meta nil when the
-- task is gone), from the one after the entry `after` ('' for the first), at most
-- `count` of them (-1: all). Returns the last entry visited when `count` were (a next
-- run goes on after it), else '' (the tag's entries are done).
local function each_leased(tag, after, count, visit)
  local from, to = tag_range(tag)
  if after ~= '' then
    from = '(' .. after
  end
  local entries = redis.call('ZRANGEBYLEX', leased, from, to, 'LIMIT', 0, count)
  for _, entry in ipairs(entries) do
    local id = string.sub(entry, #tag + 2)
    visit(entry, id, load(id))
  end
  if count >= 0 and #entries == count then
    return entries[#entries]
  end
  return ''
end
