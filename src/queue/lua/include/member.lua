-- member.lua: a task's member in pending, inflight and dead: "<seq>:<id>".
local function member(seq, id)
  return seq .. ':' .. id
end

local function member_of(meta, id)
  return member(meta.seq, id)
end

local function id_of(entry)
  return string.sub(entry, 17)
end
