-- HMAC-SHA256 in Redis's Lua, for measuring what verifying a signed
-- sequencer inside the fence would cost. Run as a script (`EVALSHA`):
-- Redis 7.0 gives scripts the `bit` library, not functions (a function
-- would need a pure-Lua bit library, slower still). Not part of the
-- fence: docs/redis-data.md, "Signed sequencers". ARGV: key, message;
-- returns the MAC (32 bytes).

local band, bor, bxor, bnot = bit.band, bit.bor, bit.bxor, bit.bnot
local rshift, ror, tobit = bit.rshift, bit.ror, bit.tobit

local K = {
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
}
for i = 1, 64 do K[i] = tobit(K[i]) end

local function sha256(message)
  local length = #message
  local zeros = (55 - length) % 64
  local bits = length * 8
  message = message .. '\128' .. string.rep('\0', zeros) .. string.rep('\0', 4)
    .. string.char(band(rshift(bits, 24), 255), band(rshift(bits, 16), 255),
      band(rshift(bits, 8), 255), band(bits, 255))
  local H = {
    tobit(0x6a09e667), tobit(0xbb67ae85), tobit(0x3c6ef372), tobit(0xa54ff53a),
    tobit(0x510e527f), tobit(0x9b05688c), tobit(0x1f83d9ab), tobit(0x5be0cd19),
  }
  local w = {}
  for block = 1, #message, 64 do
    for j = 1, 16 do
      local a, b, c, d = string.byte(message, block + (j - 1) * 4, block + (j - 1) * 4 + 3)
      w[j] = tobit(a * 16777216 + b * 65536 + c * 256 + d)
    end
    for j = 17, 64 do
      local v, u = w[j - 15], w[j - 2]
      local s0 = bxor(ror(v, 7), ror(v, 18), rshift(v, 3))
      local s1 = bxor(ror(u, 17), ror(u, 19), rshift(u, 10))
      w[j] = tobit(w[j - 16] + s0 + w[j - 7] + s1)
    end
    local a, b, c, d, e, f, g, h = H[1], H[2], H[3], H[4], H[5], H[6], H[7], H[8]
    for j = 1, 64 do
      local S1 = bxor(ror(e, 6), ror(e, 11), ror(e, 25))
      local ch = bxor(band(e, f), band(bnot(e), g))
      local t1 = tobit(h + S1 + ch + K[j] + w[j])
      local S0 = bxor(ror(a, 2), ror(a, 13), ror(a, 22))
      local maj = bxor(band(a, b), band(a, c), band(b, c))
      h, g, f, e, d, c, b, a = g, f, e, tobit(d + t1), c, b, a, tobit(t1 + S0 + maj)
    end
    H[1], H[2], H[3], H[4] = tobit(H[1] + a), tobit(H[2] + b), tobit(H[3] + c), tobit(H[4] + d)
    H[5], H[6], H[7], H[8] = tobit(H[5] + e), tobit(H[6] + f), tobit(H[7] + g), tobit(H[8] + h)
  end
  local out = {}
  for i = 1, 8 do
    local x = H[i]
    out[i] = string.char(band(rshift(x, 24), 255), band(rshift(x, 16), 255), band(rshift(x, 8), 255), band(x, 255))
  end
  return table.concat(out)
end

local function hmac(key, message)
  if #key > 64 then key = sha256(key) end
  key = key .. string.rep('\0', 64 - #key)
  local inner, outer = {}, {}
  for i = 1, 64 do
    local byte = string.byte(key, i)
    inner[i] = string.char(bxor(byte, 0x36))
    outer[i] = string.char(bxor(byte, 0x5c))
  end
  return sha256(table.concat(outer) .. sha256(table.concat(inner) .. message))
end

return hmac(ARGV[1], ARGV[2])
