"""The Redis store's Lua scripts: each one atomic step on one session's keys (one slot).

Kept apart from `store_redis` so the store reads as what it does, and each script as the
contract it keeps (its KEYS, ARGV and reply are documented above it).
"""

# Artifacts of one session, each stored once (an eviction archives a few dozen at once: one
# round trip). KEYS: the session's id set, lease, then one key per artifact. ARGV: now,
# seconds between lease refreshes, then the bytes and id of each artifact, in KEYS' order.
# Returns {bytes added, 1 when the lease was refreshed}.
PUT = """
local added = 0
for i = 3, #KEYS do
  local j = 3 + (i - 3) * 2
  if redis.call('SET', KEYS[i], ARGV[j], 'NX') then
    redis.call('SADD', KEYS[1], ARGV[j + 1])
    added = added + string.len(ARGV[j])
  end
end
local last = tonumber(redis.call('GET', KEYS[2]) or '-1')
if last < 0 or (last > 0 and tonumber(ARGV[1]) - last > tonumber(ARGV[2])) then
  redis.call('SET', KEYS[2], ARGV[1])
  return {added, 1}
end
return {added, 0}
"""

# KEYS: head, chunks, lease[, the old layout's state hash]. ARGV: head JSON, expected
# version ('' for any), now, then digest/chunk pairs. Returns {new version, chunks held},
# or {-(current + 1)} when `expect` is not the current version (nothing written).
SAVE = """
local cur = tonumber(redis.call('HGET', KEYS[1], 'v') or '0')
if cur == 0 and KEYS[4] then cur = tonumber(redis.call('HGET', KEYS[4], 'v') or '0') end
if ARGV[2] ~= '' and tonumber(ARGV[2]) ~= cur then return {-(cur + 1)} end
for i = 4, #ARGV, 2 do redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]) end
cur = cur + 1
redis.call('HSET', KEYS[1], 'v', cur, 'd', ARGV[1])
redis.call('SET', KEYS[3], ARGV[3])
if KEYS[4] then redis.call('DEL', KEYS[4]) end
return {cur, redis.call('HLEN', KEYS[2])}
"""

# KEYS: head, chunks. ARGV: version, then the digests its head reaches. Deletes every
# other chunk if the head is still at that version; the number deleted, or -1.
COLLECT = """
if tonumber(redis.call('HGET', KEYS[1], 'v') or '0') ~= tonumber(ARGV[1]) then return -1 end
local live = {}
for i = 2, #ARGV do live[ARGV[i]] = true end
local dead = 0
for _, d in ipairs(redis.call('HKEYS', KEYS[2])) do
  if not live[d] then redis.call('HDEL', KEYS[2], d); dead = dead + 1 end
end
return dead
"""

# KEYS: id set, head, chunks, lease[, old id set, old state, leases]. ARGV: session hex,
# now, lease_s, artifact key prefix[, old prefix]. Drops the session only if it is still
# not live; returns {artifacts removed, bytes freed}, or {-1, 0} when it was kept.
PRUNE_SESSION = """
local t = redis.call('GET', KEYS[4])
if (not t) and KEYS[7] then t = redis.call('ZSCORE', KEYS[7], ARGV[1]) end
if t then
  t = tonumber(t)
  if t ~= 0 and tonumber(ARGV[2]) - t <= tonumber(ARGV[3]) then return {-1, 0} end
end
local n, freed = 0, 0
local function drop(set, prefix)
  for _, aid in ipairs(redis.call('SMEMBERS', set)) do
    local k = prefix .. aid
    freed = freed + redis.call('STRLEN', k)
    redis.call('DEL', k)
    n = n + 1
  end
  redis.call('DEL', set)
end
drop(KEYS[1], ARGV[4])
if KEYS[5] then
  drop(KEYS[5], ARGV[5])
  redis.call('DEL', KEYS[6])
end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
return {n, freed}
"""

# KEYS: a session's chunks. ARGV: n, then n digests wanted, then digests held. Returns
# {the texts of those wanted (nil where lacking), the held ones the hash lacks}: a reader
# that holds a chunk parsed checks it by name instead of fetching its text again.
READ = """
local n = tonumber(ARGV[1])
local texts = {}
for i = 2, n + 1 do texts[#texts + 1] = redis.call('HGET', KEYS[1], ARGV[i]) end
local lacking = {}
for i = n + 2, #ARGV do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 0 then lacking[#lacking + 1] = ARGV[i] end
end
return {texts, lacking}
"""
