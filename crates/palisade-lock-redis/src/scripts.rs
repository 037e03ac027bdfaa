//! The Lua scripts: every state change of a lock is one of these, run
//! atomically by Redis.
//!
//! All scripts take the same eight keys, in the order of
//! [`LockKeys::all`](crate::keys::LockKeys::all), so each one may look at
//! any part of a lock's state; the keys share one hash tag, so a Redis
//! Cluster runs every script on one node. They begin with the same prelude:
//! read the server clock once (`TIME`), reap expired shared holders, and
//! *promote* (grant the lock to the head of the queue if it has become
//! free). So whoever touches a lock first after a holder vanished hands it
//! to the next waiter, whether that touch is a release, an acquire or a
//! waiter's re-check.
//!
//! The exclusive holder is `SET lock "<token> <gen> <delay> <lease> <holder>"
//! NX PX ttl`, followed, only when the `SET` succeeded, by the increment of
//! the generation key. Both happen inside one script, so no crash can leave
//! a lock without an expiry or a grant without a generation.
//!
//! Numbers: Redis hands Lua integers as doubles, exact up to 2^53. The
//! scripts refuse generations at or above [`MAX_GENERATION`] rather than
//! round them, and write integers with `%.0f` (Lua's `tostring` would write
//! `1.7e+15`).

use redis::Script;

/// The largest generation the scripts handle exactly: 2^53 - 1. With
/// [`GenerationScheme::ServerClock`](crate::GenerationScheme) generations
/// are microseconds since the Unix epoch, which stay below this until the
/// year 2255.
pub const MAX_GENERATION: u64 = (1 << 53) - 1;

/// Refuses a floor no generation of this backend (or of Redlock) can pass.
pub(crate) fn refuse_unreachable_mark(mark: u64) -> Result<(), palisade_core::RaiseFloorError> {
    if mark >= MAX_GENERATION {
        return Err(palisade_core::RaiseFloorError::OutOfRange {
            mark,
            limit: MAX_GENERATION - 1,
        });
    }
    Ok(())
}

/// The full Lua text of the acquire script (prelude included), for tools
/// and benchmarks that call it directly. Its keys and arguments are those
/// documented in `docs/backends/redis.md`.
pub fn acquire_source() -> String {
    format!("{PRELUDE}\n{ACQUIRE}")
}

/// The full Lua text of the release script (prelude included).
pub fn release_source() -> String {
    format!("{PRELUDE}\n{RELEASE}")
}

/// One script: its source and its SHA-1, computed once.
#[derive(Debug)]
pub(crate) struct LuaScript {
    /// A short name for logs and errors (`acquire`, `release`, ...).
    pub(crate) name: &'static str,
    /// The full source, sent with `EVAL` when the server's script cache
    /// does not have it (after a restart, a failover or `SCRIPT FLUSH`).
    pub(crate) source: String,
    /// The SHA-1 of `source`, sent with `EVALSHA` on the fast path.
    pub(crate) sha: String,
    /// Whether running it twice answers as running it once does, so that a
    /// call whose connection dropped may be sent again although Redis may
    /// have run it: true for all but release and expire (a second run would
    /// find the hold the first one ended and report it not held).
    pub(crate) resendable: bool,
}

impl LuaScript {
    fn new(script: ScriptName) -> Self {
        let (name, body, ends_a_hold) = script.definition();
        let source = format!("{PRELUDE}\n{body}");
        let sha = Script::new(&source).get_hash().to_owned();
        LuaScript {
            name,
            source,
            sha,
            resendable: !ends_a_hold,
        }
    }
}

/// Every script the backend runs, each named once: [`Scripts`] is indexed
/// by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ScriptName {
    /// Take the lock, or queue for it, or report that this token already
    /// holds it (a grant by hand-off whose notification was lost).
    Acquire,
    /// Give up whatever a token has: its hold (compare-and-delete) and its
    /// place in the queue. Then hand the lock to the next waiter.
    Release,
    /// Compare-and-PEXPIRE: extend a hold this token still has.
    Extend,
    /// End a hold without a release, as a crash would: lock-delay applies.
    Expire,
    /// Does the holder named by a sequencer still hold the lock?
    Check,
    /// Raise the generation counter to at least a given mark.
    RaiseFloor,
    /// What an operator sees: holders, waiters, lock-delay (read-only).
    Inspect,
    /// End the hold with a given generation, from outside.
    ForceRelease,
}

impl ScriptName {
    const ALL: [ScriptName; 8] = [
        ScriptName::Acquire,
        ScriptName::Release,
        ScriptName::Extend,
        ScriptName::Expire,
        ScriptName::Check,
        ScriptName::RaiseFloor,
        ScriptName::Inspect,
        ScriptName::ForceRelease,
    ];

    /// Its name in logs and errors, its body, and whether it ends a hold
    /// (then it is resent only when Redis cannot have run it).
    fn definition(self) -> (&'static str, &'static str, bool) {
        match self {
            ScriptName::Acquire => ("acquire", ACQUIRE, false),
            ScriptName::Release => ("release", RELEASE, true),
            ScriptName::Extend => ("extend", EXTEND, false),
            ScriptName::Expire => ("expire", EXPIRE, true),
            ScriptName::Check => ("check", CHECK, false),
            ScriptName::RaiseFloor => ("raise_floor", RAISE_FLOOR, false),
            ScriptName::Inspect => ("inspect", INSPECT, false),
            ScriptName::ForceRelease => ("force_release", FORCE_RELEASE, true),
        }
    }
}

/// Every script the backend runs, with its source and SHA-1 computed once.
#[derive(Debug)]
pub(crate) struct Scripts([LuaScript; 8]);

impl Scripts {
    pub(crate) fn new() -> Self {
        Scripts(ScriptName::ALL.map(LuaScript::new))
    }

    /// All scripts, for loading them into the script cache up front.
    pub(crate) fn all(&self) -> &[LuaScript] {
        &self.0
    }
}

impl std::ops::Index<ScriptName> for Scripts {
    type Output = LuaScript;

    fn index(&self, script: ScriptName) -> &LuaScript {
        &self.0[script as usize]
    }
}

/// Shared by every script: key names, the clock, value parsing, reaping,
/// generations, grants and promotion.
const PRELUDE: &str = r#"
local K_LOCK, K_GEN, K_SHADOW, K_DELAY = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local K_READERS, K_READERINFO, K_QUEUE, K_WAITERS = KEYS[5], KEYS[6], KEYS[7], KEYS[8]

local clock = redis.call('TIME')
local now_us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local now_ms = math.floor(now_us / 1000)
local MAX_GENERATION = 9007199254740991

local function int(n) return string.format('%.0f', n) end

-- "<token> <gen> <delay_ms> <lease> <holder>": the exclusive holder's value.
local function parse_hold(value)
  local token, generation, delay, lease, holder =
    string.match(value, '^(%S+) (%d+) (%d+) (%S+) (%S+)$')
  return token, generation, tonumber(delay), lease, holder
end

-- "<gen> <delay_ms> <lease> <holder>": a shared holder's info.
local function parse_reader(info)
  local generation, delay, lease, holder = string.match(info, '^(%d+) (%d+) (%S+) (%S+)$')
  return generation, tonumber(delay), lease, holder
end

-- "<deadline_ms> <mode> <ttl_ms> <delay_ms> <lease> <holder> <channel>": a waiter.
local function parse_waiter(entry)
  local deadline, mode, ttl, delay, lease, holder, channel =
    string.match(entry, '^(%d+) ([xs]) (%d+) (%d+) (%S+) (%S+) (%S+)$')
  if not deadline then return nil end
  return { deadline = tonumber(deadline), mode = mode, ttl = tonumber(ttl),
           delay = tonumber(delay), lease = lease, holder = holder, channel = channel }
end

-- Tells a waiter's client: a channel with the lock's hash tag lives in the
-- lock's slot and is a shard channel (a cluster's per-lock wake-ups,
-- delivered within the slot's shard); any other is the client's inbox,
-- published to every node of a cluster.
local function notify(channel, message)
  if string.find(channel, '{', 1, true) then
    redis.call('SPUBLISH', channel, message)
  else
    redis.call('PUBLISH', channel, message)
  end
end

local function owns(value, token)
  return value and string.sub(value, 1, #token + 1) == token .. ' '
end

-- Makes `key` live at least `ms` more milliseconds (garbage collection of
-- the queue and reader structures; never shortens).
local function keep_at_least(key, ms)
  local pttl = redis.call('PTTL', key)
  if pttl == -1 or (pttl >= 0 and pttl < ms) then redis.call('PEXPIRE', key, ms) end
end

-- Lock-delay: nobody is granted the lock while K_DELAY exists, nor while
-- the exclusive holder's shadow outlives its lock key.
local function extend_delay(ms)
  if ms <= 0 then return end
  local pttl = redis.call('PTTL', K_DELAY)
  if pttl < ms then redis.call('SET', K_DELAY, '1', 'PX', ms) end
end

local function delay_left()
  local left = redis.call('PTTL', K_DELAY)
  if left < 0 then left = 0 end
  if redis.call('EXISTS', K_LOCK) == 0 then
    local shadow = redis.call('PTTL', K_SHADOW)
    if shadow > left then left = shadow end
  end
  return left
end

-- Shared holders whose lease ran out: forget them, keeping their lock-delay.
local function reap_readers()
  local expired = redis.call('ZRANGEBYSCORE', K_READERS, '-inf', now_ms, 'WITHSCORES')
  for i = 1, #expired, 2 do
    local token, expiry = expired[i], tonumber(expired[i + 1])
    local info = redis.call('HGET', K_READERINFO, token)
    if info then
      local _, delay = parse_reader(info)
      if delay and delay > 0 then extend_delay(expiry + delay - now_ms) end
      redis.call('HDEL', K_READERINFO, token)
    end
    redis.call('ZREM', K_READERS, token)
  end
end

local function readers_live()
  if redis.call('EXISTS', K_READERS) == 0 then return false end
  reap_readers()
  return redis.call('ZCARD', K_READERS) > 0
end

-- Whether a holder or a lock-delay blocks every grant: the lock key, the
-- shadow (which outlives the lock key only during its lock-delay) or an
-- explicit delay exists.
local function blocked()
  return redis.call('EXISTS', K_LOCK, K_SHADOW, K_DELAY) > 0
end

-- The next generation: one above the counter and, in server-clock mode, at
-- least the server's time in microseconds, so a counter lost with Redis's
-- data restarts above every generation issued before (see docs/SAFETY.md).
local function peek_generation(clock_mode)
  local raw = redis.call('GET', K_GEN)
  local current = 0
  if raw then
    current = tonumber(raw)
    if (not current) or current >= MAX_GENERATION then
      error({ err = 'PALISADE generation counter ' .. tostring(raw) .. ' is not below 2^53-1' })
    end
  end
  local next_value = current + 1
  if clock_mode == '1' and now_us > next_value then next_value = now_us end
  return next_value, current
end

local function commit_generation(next_value, current)
  if next_value == current + 1 then
    return redis.call('INCR', K_GEN)
  end
  return redis.call('INCRBY', K_GEN, int(next_value - current))
end

-- SET lock NX PX ttl and, only on success, the generation. Returns the
-- generation, or nil if the lock key exists.
local function grant_exclusive(token, ttl, delay, lease, holder, clock_mode)
  local next_value, current = peek_generation(clock_mode)
  local value = token .. ' ' .. int(next_value) .. ' ' .. int(delay) .. ' ' .. lease .. ' ' .. holder
  if not redis.call('SET', K_LOCK, value, 'NX', 'PX', ttl) then return nil end
  local generation = commit_generation(next_value, current)
  -- No shadow can exist here: a grant needs the lock free and no delay.
  if delay > 0 then redis.call('SET', K_SHADOW, value, 'PX', ttl + delay) end
  return generation
end

local function grant_shared(token, ttl, delay, lease, holder, clock_mode)
  local next_value, current = peek_generation(clock_mode)
  local generation = commit_generation(next_value, current)
  redis.call('ZADD', K_READERS, int(now_ms + ttl), token)
  redis.call('HSET', K_READERINFO, token,
    int(generation) .. ' ' .. int(delay) .. ' ' .. lease .. ' ' .. holder)
  keep_at_least(K_READERS, ttl + delay + 1000)
  keep_at_least(K_READERINFO, ttl + delay + 1000)
  return generation
end

-- Hands the lock to the head of the queue while it can be granted: one
-- exclusive waiter, or every consecutive shared waiter. Dead entries (their
-- process stopped refreshing them) are dropped on the way. Each grant is
-- published to the waiter's process inbox with everything the waiter needs
-- to hold the lock without another request: generation, server time, and a
-- proof of the owner token.
local function promote(clock_mode)
  while true do
    local token = redis.call('LINDEX', K_QUEUE, 0)
    if not token then return end
    local entry = redis.call('HGET', K_WAITERS, token)
    local waiter = entry and parse_waiter(entry)
    if (not waiter) or waiter.deadline <= now_ms then
      redis.call('LPOP', K_QUEUE)
      redis.call('HDEL', K_WAITERS, token)
    else
      if blocked() then return end
      if waiter.mode == 'x' and readers_live() then return end
      local generation
      if waiter.mode == 'x' then
        generation = grant_exclusive(token, waiter.ttl, waiter.delay, waiter.lease, waiter.holder, clock_mode)
      else
        generation = grant_shared(token, waiter.ttl, waiter.delay, waiter.lease, waiter.holder, clock_mode)
      end
      redis.call('LPOP', K_QUEUE)
      redis.call('HDEL', K_WAITERS, token)
      -- The proof binds the grant to the waiter's secret owner token, which
      -- never leaves Redis and its owner: only the granted attempt can
      -- check it, and nobody can forge a grant for it.
      notify(waiter.channel, waiter.lease .. ' granted ' .. int(generation) .. ' ' .. int(now_ms)
        .. ' ' .. redis.sha1hex(token .. ' ' .. int(generation)))
      if waiter.mode == 'x' then return end
    end
  end
end

-- When a waiter must look again even if nobody notifies it: the holder's
-- key expires, the lock-delay ends, or the first shared holder expires.
-- -1 when nothing will change by itself.
local function wait_hint()
  local hint = -1
  local function consider(ms) if ms > 0 and (hint < 0 or ms < hint) then hint = ms end end
  consider(redis.call('PTTL', K_LOCK))
  consider(delay_left())
  local first = redis.call('ZRANGE', K_READERS, 0, 0, 'WITHSCORES')
  if first[2] then consider(tonumber(first[2]) - now_ms + 1) end
  return hint
end

-- Drops a token's hold, if it has one. Returns 1 if it did.
local function drop_hold(token, mode)
  if mode == 'x' then
    local value = redis.call('GET', K_LOCK)
    if owns(value, token) then
      redis.call('DEL', K_LOCK, K_SHADOW)
      return 1, value
    end
    return 0
  end
  local info = redis.call('HGET', K_READERINFO, token)
  if redis.call('ZREM', K_READERS, token) == 1 then
    redis.call('HDEL', K_READERINFO, token)
    return 1, info
  end
  return 0
end
"#;

/// KEYS: the eight lock keys.
/// ARGV: token, mode (`x`/`s`), ttl ms, delay ms, lease id, holder id,
/// inbox channel, enqueue (`1`/`0`), waiter entry ttl ms, clock mode
/// (`1`/`0`).
///
/// Returns `{1, generation, server_ms}` when the token holds the lock (now,
/// or already by hand-off), `{0, hint_ms}` when it is queued, `{-1, hint_ms}`
/// when it is neither (try-acquire).
const ACQUIRE: &str = r#"
local token, mode, ttl, delay = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local lease, holder, channel, enqueue = ARGV[5], ARGV[6], ARGV[7], ARGV[8]
local waiter_ttl, clock_mode = tonumber(ARGV[9]), ARGV[10]

-- Fast path: nothing about this lock exists but its counter, so nobody
-- holds it, waits for it or is in a lock-delay (and neither is this token).
if redis.call('EXISTS', K_LOCK, K_SHADOW, K_DELAY, K_READERS, K_QUEUE) == 0 then
  local generation
  if mode == 'x' then
    generation = grant_exclusive(token, ttl, delay, lease, holder, clock_mode)
  else
    generation = grant_shared(token, ttl, delay, lease, holder, clock_mode)
  end
  return { 1, generation, now_ms }
end

local value = redis.call('GET', K_LOCK)
if value then
  -- An exclusive holder blocks every grant: reaping and promotion could not
  -- change anything, so they are skipped.
  if mode == 'x' and owns(value, token) then
    local _, generation = parse_hold(value)
    return { 1, tonumber(generation), now_ms }
  end
else
  reap_readers()
  promote(clock_mode)
  value = redis.call('GET', K_LOCK)
  if mode == 'x' then
    if owns(value, token) then
      local _, generation = parse_hold(value)
      return { 1, tonumber(generation), now_ms }
    end
  elseif redis.call('ZSCORE', K_READERS, token) then
    local generation = parse_reader(redis.call('HGET', K_READERINFO, token) or '')
    if generation then return { 1, tonumber(generation), now_ms } end
  end
end

-- The queue and its entries are garbage-collected with a TTL that every
-- enqueue and refresh pushes forward (never back).
local function keep_queue(new_queue)
  local ms = waiter_ttl + 1000
  if new_queue then
    redis.call('PEXPIRE', K_QUEUE, ms)
    redis.call('PEXPIRE', K_WAITERS, ms)
  else
    redis.call('PEXPIRE', K_QUEUE, ms, 'GT')
    redis.call('PEXPIRE', K_WAITERS, ms, 'GT')
  end
end

local function hint()
  if value then
    local pttl = redis.call('PTTL', K_LOCK)
    if pttl > 0 then return pttl end
  end
  return wait_hint()
end

local entry = table.concat({ int(now_ms + waiter_ttl), mode, int(ttl), int(delay), lease, holder, channel }, ' ')
if redis.call('HEXISTS', K_WAITERS, token) == 1 then
  redis.call('HSET', K_WAITERS, token, entry)
  keep_queue(false)
  return { 0, hint() }
end

if value == false and delay_left() == 0 and redis.call('LLEN', K_QUEUE) == 0 then
  local generation
  if mode == 'x' then
    if not readers_live() then
      generation = grant_exclusive(token, ttl, delay, lease, holder, clock_mode)
    end
  else
    generation = grant_shared(token, ttl, delay, lease, holder, clock_mode)
  end
  if generation then return { 1, generation, now_ms } end
end

if enqueue == '1' then
  local length = redis.call('RPUSH', K_QUEUE, token)
  redis.call('HSET', K_WAITERS, token, entry)
  keep_queue(length == 1)
  return { 0, hint() }
end
return { -1, hint() }
"#;

/// KEYS: the eight lock keys. ARGV: token, mode, clock mode, dequeue
/// (`1` to also remove the token's queue entry: an abandoned attempt).
///
/// Returns 1 if the token held the lock and no longer does, 0 if it did
/// not hold it (its lease lapsed, or it never got it). Then the next waiter
/// has been promoted.
const RELEASE: &str = r#"
local token, mode, clock_mode, dequeue = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if mode == 's' then reap_readers() end
local released = drop_hold(token, mode)
if dequeue == '1' and redis.call('HDEL', K_WAITERS, token) == 1 then
  redis.call('LREM', K_QUEUE, 0, token)
end
promote(clock_mode)
return released
"#;

/// KEYS: the eight lock keys. ARGV: token, mode, ttl ms, delay ms.
///
/// Returns 1 if the hold was extended by `ttl` from now, 0 if the token no
/// longer holds the lock (compare-and-PEXPIRE: nobody else's hold is ever
/// touched).
const EXTEND: &str = r#"
local token, mode, ttl, delay = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
if mode == 'x' then
  local value = redis.call('GET', K_LOCK)
  if not owns(value, token) then return 0 end
  redis.call('PEXPIRE', K_LOCK, ttl)
  if delay > 0 then redis.call('SET', K_SHADOW, value, 'PX', ttl + delay) end
  return 1
end
reap_readers()
if not redis.call('ZSCORE', K_READERS, token) then return 0 end
redis.call('ZADD', K_READERS, 'XX', int(now_ms + ttl), token)
keep_at_least(K_READERS, ttl + delay + 1000)
keep_at_least(K_READERINFO, ttl + delay + 1000)
return 1
"#;

/// KEYS: the eight lock keys. ARGV: token, mode, clock mode.
///
/// Ends the token's hold *without* a release, as its lease running out
/// would: its lock-delay starts now. Queued waiters are told to look again
/// (they learn how long the delay lasts). Returns 1 if there was a hold.
const EXPIRE: &str = r#"
local token, mode, clock_mode = ARGV[1], ARGV[2], ARGV[3]
reap_readers()
local dropped, value = drop_hold(token, mode)
if dropped == 1 then
  local delay
  if mode == 'x' then
    local _, _, hold_delay = parse_hold(value)
    delay = hold_delay
  else
    local _, reader_delay = parse_reader(value)
    delay = reader_delay
  end
  if delay and delay > 0 then extend_delay(delay) end
  local waiting = redis.call('HVALS', K_WAITERS)
  for i = 1, #waiting do
    local waiter = parse_waiter(waiting[i])
    if waiter then notify(waiter.channel, waiter.lease .. ' recheck') end
  end
end
promote(clock_mode)
return dropped
"#;

/// KEYS: the eight lock keys. ARGV: mode, generation, lease id (may be
/// empty).
///
/// Returns 1 if a live hold of that mode has that generation (and lease id,
/// when given), 0 otherwise. Read-only apart from reaping.
const CHECK: &str = r#"
local mode, generation, lease = ARGV[1], ARGV[2], ARGV[3]
if mode == 'x' then
  local value = redis.call('GET', K_LOCK)
  if not value then return 0 end
  local _, held_generation, _, held_lease = parse_hold(value)
  if held_generation == generation and (lease == '' or lease == held_lease) then return 1 end
  return 0
end
local live = redis.call('ZRANGEBYSCORE', K_READERS, '(' .. now_ms, '+inf')
for i = 1, #live do
  local info = redis.call('HGET', K_READERINFO, live[i])
  if info then
    local held_generation, _, held_lease = parse_reader(info)
    if held_generation == generation and (lease == '' or lease == held_lease) then return 1 end
  end
end
return 0
"#;

/// KEYS: the eight lock keys. ARGV: mark.
///
/// Raises the generation counter to at least `mark`, so the next grant is
/// above it. Returns `{before, after}`: the counter before and afterwards
/// (0 where it did not exist).
const RAISE_FLOOR: &str = r#"
local mark = tonumber(ARGV[1])
local raw = redis.call('GET', K_GEN)
local current = 0
if raw then current = tonumber(raw) end
if (not current) or current >= MAX_GENERATION or mark >= MAX_GENERATION then
  error({ err = 'PALISADE generation above 2^53-1' })
end
if mark > current then
  redis.call('SET', K_GEN, int(mark))
  return {current, mark}
end
return {current, current}
"#;

/// KEYS: the eight lock keys. No ARGV.
///
/// Returns `{hold, hold_pttl_ms, delay_left_ms, readers, waiters}`: the
/// exclusive holder's value without its secret token (`"<gen> <delay>
/// <lease> <holder>"`, or `""`), the lock key's PTTL, the lock-delay left,
/// the live shared holders as `{info, pttl_ms}` pairs flattened, and the
/// live queue entries in order. Read-only: nothing is reaped or promoted.
const INSPECT: &str = r#"
local hold = ''
local value = redis.call('GET', K_LOCK)
if value then
  local _, generation, delay, lease, holder = parse_hold(value)
  if generation then hold = generation .. ' ' .. int(delay) .. ' ' .. lease .. ' ' .. holder end
end
local readers = {}
local live = redis.call('ZRANGEBYSCORE', K_READERS, '(' .. now_ms, '+inf', 'WITHSCORES')
for i = 1, #live, 2 do
  local info = redis.call('HGET', K_READERINFO, live[i])
  if info then
    table.insert(readers, info)
    table.insert(readers, tonumber(live[i + 1]) - now_ms)
  end
end
local waiters = {}
local queue = redis.call('LRANGE', K_QUEUE, 0, -1)
for i = 1, #queue do
  local entry = redis.call('HGET', K_WAITERS, queue[i])
  local waiter = entry and parse_waiter(entry)
  if waiter and waiter.deadline > now_ms then table.insert(waiters, entry) end
end
return { hold, redis.call('PTTL', K_LOCK), delay_left(), readers, waiters }
"#;

/// KEYS: the eight lock keys. ARGV: generation, clock mode.
///
/// Ends the hold (exclusive or shared) whose generation is `generation`,
/// without a lock-delay, then hands the lock to the next waiter. Returns 1
/// if there was such a hold, 0 otherwise (a newer holder is never touched).
const FORCE_RELEASE: &str = r#"
local generation, clock_mode = ARGV[1], ARGV[2]
local released = 0
local value = redis.call('GET', K_LOCK)
if value then
  local _, held = parse_hold(value)
  if held == generation then
    redis.call('DEL', K_LOCK, K_SHADOW)
    released = 1
  end
else
  reap_readers()
  local tokens = redis.call('ZRANGE', K_READERS, 0, -1)
  for i = 1, #tokens do
    local info = redis.call('HGET', K_READERINFO, tokens[i])
    if info and parse_reader(info) == generation then
      redis.call('ZREM', K_READERS, tokens[i])
      redis.call('HDEL', K_READERINFO, tokens[i])
      released = 1
    end
  end
end
if released == 1 then promote(clock_mode) end
return released
"#;
