#!/usr/bin/env bash
# memory-layouts.sh: Redis memory per pending message of delayq's layout and
# of three alternatives that give up some of it, measured on a scratch
# redis-server (127.0.0.1, a free port, a temporary directory, stopped
# afterwards) with 1,000,000 messages of 100-byte bodies and 16-byte ids
# over 16 shards, as `scripts/bench.sh`'s memory scenario uses:
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
# Usage: scripts/memory-layouts.sh [messages]   (needs redis-server, python3)
set -euo pipefail
for bin in redis-server redis-cli python3; do
  command -v "$bin" >/dev/null || { echo "memory-layouts.sh: $bin not found (scripts/install.sh installs it)" >&2; exit 1; }
done
n=${1:-1000000}
dir=$(mktemp -d)
port=$((20000 + RANDOM % 10000))
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT

cat >"$dir/gen.py" <<'EOF'
import random, sys
layout, n = sys.argv[1], int(sys.argv[2])
M, B = 16, 4096
out = sys.stdout.buffer
def cmd(*args):
    parts = [b'*%d\r\n' % len(args)]
    for a in args:
        a = a.encode() if isinstance(a, str) else a
        parts.append(b'$%d\r\n%s\r\n' % (len(a), a))
    out.write(b''.join(parts))
random.seed(1)
body, framing = b'x' * 100, b'F' * 27  # today's envelope: 27 bytes of destination and framing
for i in range(n):
    mid, s = 'm%015d' % i, i % M
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
EOF

used() { redis-cli -p "$port" info memory | tr -d '\r' | sed -n 's/^used_memory://p'; }
printf '%-16s %8s  %s\n' layout "B/msg" "over body (100) + id (16)"
for layout in today env-zset env-zset+index buckets; do
  extra=()
  [ "$layout" = buckets ] && extra=(--hash-max-listpack-value 256)
  rm -rf "$dir/data" && mkdir "$dir/data"
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir/data" \
    --daemonize yes --logfile "$dir/redis.log" "${extra[@]}" >/dev/null
  for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  redis-cli -p "$port" ping >/dev/null 2>&1 || { echo "memory-layouts.sh: redis-server on port $port did not start:" >&2; cat "$dir/redis.log" >&2; exit 1; }
  before=$(used)
  python3 "$dir/gen.py" "$layout" "$n" | redis-cli -p "$port" --pipe >/dev/null
  after=$(used)
  per=$(( (after - before) / n ))
  printf '%-16s %8d  +%d\n' "$layout" "$per" $((per - 116))
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 || break; sleep 0.1; done
done
