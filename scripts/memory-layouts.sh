#!/usr/bin/env bash
# memory-layouts.sh: Redis memory per pending message of delayq's layout and
# of alternatives, measured on a scratch redis-server (127.0.0.1, a free
# port, a temporary directory, stopped afterwards) with 1,000,000 messages
# of 100-byte bodies and 16-byte ids over 16 shards, as `scripts/bench.sh`'s
# memory scenario uses:
#
#   today     due ZSET (id -> due ms) + msg HASH (id -> envelope of 127 bytes)
#   env-zset  the envelope (id, 9 bytes of framing, body) as the ZSET member,
#             no way to find a message by its id (no cancel, no status)
#   env-zset+index  the same plus id -> due in 4,096 small HASHes per shard
#             (listpack-encoded: at most 128 short fields each)
#   buckets   today's due ZSET + envelopes in 4,096 HASHes per shard, which
#             are listpacks only with hash-max-listpack-value >= 160 (not
#             Redis's default of 64, so not on a stock server)
#
# and two layouts for messages due far ahead (a far-future tier), which need
# no place in a ZSET until they come near:
#
#   far-raw   per shard and 10-minute bucket of due times, one STRING of the
#             bucket's records appended (varint length, id, varint due
#             offset in the bucket, the 127-byte envelope), plus id ->
#             bucket in small listpack HASHes per shard, about 100 ids
#             each (what cancel and lookup by id need)
#   far-zstd  the same, each bucket's records compressed with zstd (level
#             3) in blocks of 256, each block its own frame
#
# The far layouts spread the due times over 60 buckets a shard, so that a
# bucket holds about 1,000 records, nearer to what 100,000,000 messages due
# over 7 days in 10-minute buckets and 16 shards would hold (about 6,200)
# than 1,000,000 over 7 days would (about 60): compression depends on it.
#
# BODY sets the bodies: json (default: 100-byte JSON objects of an order
# event, random values and a random hex reference), json1k (1 KiB JSON:
# line items, a note of words, a reference), random (100 random bytes,
# which do not compress).
#
# Usage: [BODY=json|json1k|random] scripts/memory-layouts.sh [messages] [layout...]
# (needs redis-server and Debian's python3 with python3-zstandard, which
# it installs from apt when missing)
set -euo pipefail
for bin in redis-server redis-cli; do
  command -v "$bin" >/dev/null || { echo "memory-layouts.sh: $bin not found (scripts/install.sh installs it)" >&2; exit 1; }
done
py=/usr/bin/python3 # Debian's, which sees python3-zstandard (a pyenv shim would not)
if ! "$py" -c 'import zstandard' >/dev/null 2>&1; then
  echo "memory-layouts.sh: installing python3-zstandard from apt" >&2
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-zstandard >/dev/null
fi
n=${1:-1000000}
shift || true
layouts=("$@")
[ ${#layouts[@]} -gt 0 ] || layouts=(today env-zset env-zset+index buckets far-raw far-zstd)
body=${BODY:-json}
dir=$(mktemp -d)
port=$((20000 + RANDOM % 10000))
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT

cat >"$dir/gen.py" <<'EOF'
import json, os, random, sys
import zstandard
layout, n, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
M, B = 16, 4096
out = sys.stdout.buffer
def cmd(*args):
    parts = [b'*%d\r\n' % len(args)]
    for a in args:
        a = a.encode() if isinstance(a, str) else a
        parts.append(b'$%d\r\n%s\r\n' % (len(a), a))
    out.write(b''.join(parts))
def varint(v):
    b = bytearray()
    while True:
        x = v & 0x7f
        v >>= 7
        if not v:
            b.append(x)
            return bytes(b)
        b.append(x | 0x80)
random.seed(1)
WORDS = 'order cancel unpaid payment pending customer reminder trial ends renewal invoice due shipped refund'.split()
def pad(n):  # n bytes of random hex (a reference number): does not compress more than ids do
    return ('%x' % random.getrandbits(4 * n + 4))[:n].rjust(n, '0').encode()
def body_of(i):
    if kind == 'random':
        return os.urandom(100)
    if kind == 'json1k':
        items = [{'sku': 'SKU-%06d' % random.randrange(10**6), 'qty': random.randrange(1, 9), 'cents': random.randrange(100, 99999)}
                 for _ in range(12)]
        note = ' '.join(random.choice(WORDS) for _ in range(60))
        raw = json.dumps({'order': 'o%09d' % i, 'user': random.randrange(10**8), 'event': 'cancel_unpaid',
                          'items': items, 'note': note, 'ref': ''}, separators=(',', ':')).encode()
        if len(raw) >= 1024:
            return raw[:1022] + b'"}'  # the note cut short
        return raw[:-2] + pad(1024 - len(raw)) + b'"}'
    raw = json.dumps({'order': 'o%09d' % i, 'user': random.randrange(10**8), 'event': 'cancel_unpaid',
                      'cents': random.randrange(100, 99999), 'cur': 'EUR', 'ref': ''}, separators=(',', ':')).encode()
    return raw[:-2] + pad(100 - len(raw)) + b'"}'
def framing_of(i):  # today's envelope: 27 bytes of version, topic, enqueue time and flags before the body
    return b'\x02\x0corder.cancel' + varint(1795600000000 + 3 * i) + b'\x00' * 7
FAR_BUCKETS, WIDTH = 60, 600000  # 10-minute buckets
idx_hashes = max(1, n // M // 100)
far = {}
for i in range(n):
    mid, s = '%016x' % random.getrandbits(64), i % M  # 16 random hex digits: ids compress no better than real ones
    body = body_of(i)
    framing = framing_of(i)
    if layout.startswith('far'):
        due = random.randrange(FAR_BUCKETS * WIDTH)
        b = due // WIDTH
        rec = mid.encode() + varint(due - b * WIDTH) + framing + body
        far.setdefault((s, b), []).append(varint(len(rec)) + rec)
        h = (i * 2654435761) % (1 << 32) % idx_hashes
        cmd('HSET', 'dq:{ns:%d}:fidx:%d' % (s, h), mid, str(b))
        continue
    due = str(1795600000000 + random.randrange(3600000))
    bucket = i * 2654435761 % (1 << 32) % B
    if layout in ('today', 'buckets'):
        cmd('ZADD', 'dq:{ns:%d}:due' % s, due, mid)
    if layout == 'today':
        cmd('HSET', 'dq:{ns:%d}:msg' % s, mid, framing + body)
    elif layout == 'buckets':
        cmd('HSET', 'dq:{ns:%d}:msg:%d' % (s, bucket), mid, framing + body)
    else:
        cmd('ZADD', 'dq:{ns:%d}:due' % s, due, mid.encode() + b'|' + framing[:8] + body)
        if layout == 'env-zset+index':
            cmd('HSET', 'dq:{ns:%d}:idx:%d' % (s, bucket), mid, due)
zc = zstandard.ZstdCompressor(level=3)
raw_bytes = packed_bytes = 0
for (s, b), recs in far.items():
    if layout == 'far-raw':
        v = b''.join(recs)
    else:
        blocks = [zc.compress(b''.join(recs[k:k + 256])) for k in range(0, len(recs), 256)]
        v = b''.join(varint(len(x)) + x for x in blocks)
    raw_bytes += sum(len(r) for r in recs)
    packed_bytes += len(v)
    cmd('SET', 'dq:{ns:%d}:far:%d' % (s, b), v)
if far:
    sys.stderr.write('%s: records %.1f bytes a message, stored %.1f (%.2fx)\n' % (layout, raw_bytes / n, packed_bytes / n, raw_bytes / max(1, packed_bytes)))
EOF

used() { redis-cli -p "$port" info memory | tr -d '\r' | sed -n 's/^used_memory://p'; }
bodybytes=100; [ "$body" = json1k ] && bodybytes=1024
printf '%-16s %8s  %s\n' layout "B/msg" "over body ($bodybytes) + id (16), bodies: $body"
for layout in "${layouts[@]}"; do
  extra=()
  [ "$layout" = buckets ] && extra=(--hash-max-listpack-value 256)
  rm -rf "$dir/data" && mkdir "$dir/data"
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir/data" \
    --daemonize yes --logfile "$dir/redis.log" "${extra[@]}" >/dev/null
  for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  redis-cli -p "$port" ping >/dev/null 2>&1 || { echo "memory-layouts.sh: redis-server on port $port did not start:" >&2; cat "$dir/redis.log" >&2; exit 1; }
  before=$(used)
  "$py" "$dir/gen.py" "$layout" "$n" "$body" | redis-cli -p "$port" --pipe >/dev/null
  after=$(used)
  per=$(( (after - before) / n ))
  printf '%-16s %8d  %+d\n' "$layout" "$per" $((per - bodybytes - 16))
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 || break; sleep 0.1; done
done
