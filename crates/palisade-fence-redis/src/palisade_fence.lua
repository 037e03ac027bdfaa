#!lua name=palisade_fence
-- palisade_fence version 3
--
-- Palisade's fence for data kept in Redis: the fencing rule of
-- palisade_core::marks::Marks::admit, applied to a lock's marks record,
-- and the write, in one atomic call. KEYS[1] is the lock's marks record, a
-- string 'x s n': x = H_excl, s = H_shared (decimal strings, so every u64
-- compares exactly, which Lua's doubles cannot), n = the lock's write
-- sequence. A record of version 2's layout, a hash of the fields x, s and
-- n, is read as well and rewritten as a string at its next write.
-- One call carries one or more requests (a client groups the requests
-- that queue while its previous call is in flight): each is judged and
-- applied on its own, in order, and answered on its own. KEYS are the
-- marks records and data keys of all of them, once each (on a cluster,
-- all in one hash slot).
--
-- Redis does not roll a function back: every op of a request is checked
-- before its first write, so a refused or failed request changes nothing.

local U64_MAX = '18446744073709551615'
-- The integers a double holds exactly: counters are refused beyond them.
local EXACT = 9007199254740991

-- `text` if it is a canonical decimal u64 (no sign, no leading zero), 0
-- only when `zero_ok`; else nil.
local function decimal(text, zero_ok)
  if text == '0' then
    if zero_ok then return text end
    return nil
  end
  if type(text) ~= 'string' or #text > 20 or not string.find(text, '^[1-9]%d*$') then
    return nil
  end
  if #text == 20 and text > U64_MAX then return nil end
  return text
end

-- a >= b for canonical decimals, byte by byte (no locale collation).
local function ge(a, b)
  if #a ~= #b then return #a > #b end
  if a == b then return true end
  for i = 1, #a do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x > y end
  end
  return true
end

local function max(a, b)
  if ge(a, b) then return a end
  return b
end

-- The fencing rule (Marks::admit): exclusive g needs g >= max(x, s) and
-- sets x = g; shared g needs g >= x and sets s = max(s, g). Returns the
-- marks after, or nil when the request is stale.
local function admit(x, s, mode, g)
  local required
  if mode == 'x' then required = max(x, s) else required = x end
  local admitted = ge(g, required)
  if not admitted then return nil end
  if mode == 'x' then return g, s end
  return x, max(s, g)
end

-- A canonical Redis integer within EXACT, as a number; else nil.
local function integer(text)
  if type(text) ~= 'string' then return nil end
  if text ~= '0' and not string.find(text, '^%-?[1-9]%d*$') then return nil end
  if #text > 17 then return nil end
  local value = tonumber(text)
  if value == nil or value > EXACT or value < -EXACT then return nil end
  return value
end

local function read_marks(key)
  local x, s, n = '0', '0', '0'
  local record = redis.pcall('GET', key)
  if type(record) == 'string' then
    x, s, n = string.match(record, '^(%d+) (%d+) (%-?%d+)$')
  elseif type(record) == 'table' then
    if redis.call('TYPE', key)['ok'] ~= 'hash' then return nil end
    local m = redis.call('HMGET', key, 'x', 's', 'n')
    x, s, n = m[1] or '0', m[2] or '0', m[3] or '0'
  end
  if not decimal(x, true) or not decimal(s, true) or not integer(n) then
    return nil
  end
  return x, s, n
end

-- Writes a lock's marks record (its TTL, if someone gave it one, stays).
local function write_marks(key, x, s, n)
  redis.call('SET', key, x .. ' ' .. s .. ' ' .. n, 'KEEPTTL')
end

local function fail(message)
  return redis.error_reply('PALISADE ' .. message)
end

-- A request's own error (the call's other requests go on).
local function bad(message)
  return { 'error', 'PALISADE ' .. message }
end

-- Ops: code, data key index (2..#KEYS), then the code's arguments.
local ARITY = { set = 1, del = 0, incr = 2, hset = 2, hdel = 1, get = 0, hget = 1 }
local WRITES = { set = true, del = true, incr = true, hset = true, hdel = true }
-- The kind of value an op needs its key to hold (nil: any, SET replaces).
local NEEDS = { incr = 'string', get = 'string', hset = 'hash', hdel = 'hash', hget = 'hash' }

-- Reads a lock's marks, puts back what Redis lost (the floors: marks this
-- client saw before) and applies the rule. Returns the marks before, n,
-- restored (0|1) and the marks after; or nil and the request's answer.
local function judge(marks_key, mode, g, floor_x, floor_s)
  local x, s, n = read_marks(marks_key)
  if not x then return nil, bad('corrupt marks record') end
  local restored = 0
  if not ge(x, floor_x) or not ge(s, floor_s) then
    x, s, restored = max(x, floor_x), max(s, floor_s), 1
  end
  local after_x, after_s = admit(x, s, mode, g)
  if not after_x then
    if restored == 1 then write_marks(marks_key, x, s, n) end
    return nil, { 'stale', x, s, restored }
  end
  return x, s, n, restored, after_x, after_s
end

-- The steady holder's call: one INCRBY/DECRBY without a floor, exclusive
-- (a = marks index, 'x', g, floor x, floor s, '1', 'incr', key index, by,
-- ''). Three redis.calls (GET, INCRBY, SET) and no table but the
-- answer. Redis's INCRBY checks the kind and the integer, and leaves the
-- key unchanged when it refuses; a result beyond the exact range is
-- undone at once (in the same atomic call) and refused as in `request`.
local function counter(keys, base, a)
  local marks_key, key = keys[base + (tonumber(a[1]) or 0)], keys[base + (tonumber(a[8]) or 0)]
  if marks_key == nil or key == nil or key == marks_key then return bad('op 0: bad key index') end
  local g, floor_x, floor_s = decimal(a[3]), decimal(a[4], true), decimal(a[5], true)
  if not g or not floor_x or not floor_s then return bad('bad generation or floor') end
  local by = integer(a[9])
  if by == nil then return bad('op 0: bad increment or floor') end
  local x, s, n, restored, after_x, after_s = judge(marks_key, 'x', g, floor_x, floor_s)
  if not x then return s end
  local new = redis.pcall('INCRBY', key, a[9])
  if type(new) == 'table' then
    if string.find(new.err or '', 'WRONGTYPE', 1, true) then return { 'wrongtype', 0 } end
    return { 'notinteger', 0 }
  end
  if new > EXACT or new < -EXACT then
    redis.call('INCRBY', key, string.format('%d', -by))
    return { 'notinteger', 0 }
  end
  n = integer(n) + 1
  write_marks(marks_key, after_x, after_s, string.format('%d', n))
  return { 'ok', after_x, after_s, n, restored, new }
end

-- One request, `a` (key indexes count from `base`, the keys of the
-- requests before it): marks record index, mode (x|s), generation,
-- floor x, floor s, op count, ops. Returns {'ok', x, s, n, restored,
-- result...}, {'stale', x, s, restored}, {'short', op index, current},
-- {'wrongtype', op index}, {'notinteger', op index}, {'shared_on_write'}
-- or {'error', message}.
local function request(keys, base, a)
  if #a == 10 and a[7] == 'incr' and a[10] == '' and a[2] == 'x' and a[6] == '1' then
    return counter(keys, base, a)
  end
  local marks_key = keys[base + (tonumber(a[1]) or 0)]
  if marks_key == nil then return bad('bad marks record index') end
  local mode = a[2]
  if mode ~= 'x' and mode ~= 's' then return bad('mode must be x or s') end
  local g = decimal(a[3])
  local floor_x, floor_s = decimal(a[4], true), decimal(a[5], true)
  if not g or not floor_x or not floor_s then return bad('bad generation or floor') end
  local count = tonumber(a[6])
  if count == nil or count < 0 or count ~= math.floor(count) then return bad('bad op count') end
  local ops, at, writes = {}, 7, false
  for index = 1, count do
    local code, key = a[at], tonumber(a[at + 1])
    local arity = ARITY[code]
    if arity == nil then return bad('unknown op ' .. tostring(code)) end
    if key ~= nil then key = base + key end
    if key == nil or keys[key] == nil or keys[key] == marks_key or key ~= math.floor(key) then
      return bad('op ' .. (index - 1) .. ': bad key index')
    end
    local op = { code = code, key = keys[key], a = a[at + 2], b = a[at + 3] }
    if code == 'incr' then
      op.by = integer(op.a)
      if op.by == nil or (op.b ~= '' and integer(op.b) == nil) then
        return bad('op ' .. (index - 1) .. ': bad increment or floor')
      end
      if op.b ~= '' then op.floor = integer(op.b) end
    end
    writes = writes or WRITES[code] == true
    ops[index] = op
    at = at + 2 + arity
  end
  if at - 1 ~= #a then return bad('arguments do not match the ops') end
  if writes and mode ~= 'x' then return { 'shared_on_write' } end

  local x, s, n, restored, after_x, after_s = judge(marks_key, mode, g, floor_x, floor_s)
  if not x then return s end

  -- Check every op against what the ops before it leave behind.
  local kind, value, results = {}, {}, {}
  for index, op in ipairs(ops) do
    local key = op.key
    if kind[key] == nil and op.code == 'incr' then
      -- One GET tells both the kind and the value of a counter.
      local got = redis.pcall('GET', key)
      if type(got) == 'table' then
        kind[key] = 'other'
      elseif got then
        kind[key], value[key] = 'string', got
      else
        kind[key] = 'none'
      end
    end
    if kind[key] == nil then kind[key] = redis.call('TYPE', key)['ok'] end
    local needs = NEEDS[op.code]
    if needs and kind[key] ~= 'none' and kind[key] ~= needs then
      return { 'wrongtype', index - 1 }
    end
    if op.code == 'set' then
      results[index] = (kind[key] == 'none') and 'created' or 'replaced'
      kind[key], value[key] = 'string', op.a
    elseif op.code == 'del' then
      results[index] = (kind[key] == 'none') and 'absent' or 'deleted'
      kind[key], value[key] = 'none', nil
    elseif op.code == 'incr' then
      local text = value[key]
      if text == nil and kind[key] == 'string' then text = redis.call('GET', key) end
      local current = 0
      if text ~= nil then current = integer(text) end
      if current == nil then return { 'notinteger', index - 1 } end
      local new = current + op.by
      if new > EXACT or new < -EXACT then return { 'notinteger', index - 1 } end
      if op.floor ~= nil and new < op.floor then return { 'short', index - 1, current } end
      results[index] = new
      kind[key], value[key] = 'string', string.format('%d', new)
    elseif op.code == 'hset' or op.code == 'hdel' then
      kind[key] = (op.code == 'hset') and 'hash' or kind[key]
    end
  end

  if writes then n = string.format('%d', integer(n) + 1) end
  if restored == 1 or after_x ~= x or after_s ~= s or writes then
    write_marks(marks_key, after_x, after_s, n)
  end
  n = integer(n)
  for index, op in ipairs(ops) do
    if op.code == 'set' then
      redis.call('SET', op.key, op.a)
    elseif op.code == 'del' then
      redis.call('DEL', op.key)
    elseif op.code == 'incr' then
      redis.call('INCRBY', op.key, op.a)
    elseif op.code == 'hset' then
      results[index] = (redis.call('HSET', op.key, op.a, op.b) == 1) and 'created' or 'replaced'
    elseif op.code == 'hdel' then
      results[index] = (redis.call('HDEL', op.key, op.a) == 1) and 'deleted' or 'absent'
    elseif op.code == 'get' then
      results[index] = redis.call('GET', op.key)
    elseif op.code == 'hget' then
      results[index] = redis.call('HGET', op.key, op.a)
    end
  end
  local reply = { 'ok', after_x, after_s, n, restored }
  for index = 1, count do reply[5 + index] = results[index] end
  return reply
end

-- ARGV: protocol (2), request count, then per request: its argument
-- count, its keys' base (how many keys the requests before it have) and
-- its arguments (see `request`). Returns one answer per request, in order.
local function apply(keys, args)
  if args[1] ~= '2' then return fail('protocol ' .. tostring(args[1]) .. ' is not 2') end
  local count = tonumber(args[2])
  if count == nil or count < 1 or count ~= math.floor(count) then return fail('bad request count') end
  local answers, at = {}, 3
  for index = 1, count do
    local size, base = tonumber(args[at]), tonumber(args[at + 1])
    if size == nil or size < 6 or size ~= math.floor(size) or at + 1 + size > #args
      or base == nil or base < 0 or base ~= math.floor(base) then
      return fail('request ' .. (index - 1) .. ': bad size or key base')
    end
    answers[index] = request(keys, base, { unpack(args, at + 2, at + 1 + size) })
    at = at + size + 2
  end
  if at - 1 ~= #args then return fail('arguments do not match the requests') end
  return answers
end

-- ARGV: protocol (2), floor. H_excl = max(H_excl, floor). Returns {x, s, n}.
local function raise_floor(keys, args)
  if args[1] ~= '2' then return fail('protocol ' .. tostring(args[1]) .. ' is not 2') end
  local floor = decimal(args[2])
  if not floor then return fail('bad floor') end
  local x, s, n = read_marks(keys[1])
  if not x then return fail('corrupt marks record') end
  if not ge(x, floor) then
    x = floor
    write_marks(keys[1], x, s, n)
  end
  return { x, s, n }
end

-- Returns {x, s, n} without changing anything.
local function marks(keys, args)
  local x, s, n = read_marks(keys[1])
  if not x then return fail('corrupt marks record') end
  return { x, s, n }
end

redis.register_function{ function_name = 'palisade_fence_apply', callback = apply }
redis.register_function{ function_name = 'palisade_fence_raise_floor', callback = raise_floor }
redis.register_function{
  function_name = 'palisade_fence_marks', callback = marks, flags = { 'no-writes' },
}
