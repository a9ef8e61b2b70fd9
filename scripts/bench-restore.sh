#!/usr/bin/env bash
# How long "oncepay restore" takes for a large database (BENCHMARKS.md,
# docs/replication.md). Not part of the test suite: it writes about three
# times the database to disk and keeps two cores busy for minutes.
#
#   scripts/bench-restore.sh [DIR]
#
# 1. Fill DIR/big.db. With "oncepay bench fill" (rows made by the domain's
#    own functions, appended in batches): PAYMENTS payments (default
#    700,000, about 1 GB), a tenth of them with their keys' records live and
#    a tenth past the retention but not yet purged. A binary without it
#    fills over HTTP instead, much more slowly: "oncepay demo" loaded with
#    "oncepay bench --scenario new" until the file reaches SIZE_MB (default
#    1024), each round checked against the simulated bank's ledger. FILL_BIN
#    names another oncepay binary for this step. Skipped if DIR/big.db
#    exists, so a second run times the restore again without filling again.
# 2. Replicate: "oncepay serve --replica file://DIR/replica" on it until the
#    first sync has shipped the file, then SIGTERM (which ships the rest).
#    Skipped if DIR/replica exists.
# 3. Restore RUNS times (default 3) into a new file: the wall time and the
#    CPU time of each.
#
# Needs curl. DIR defaults to a new directory under /var/tmp, left in place
# (remove it yourself); put it on the disk you mean to measure.
set -euo pipefail
cd "$(dirname "$0")/.."

payments=${PAYMENTS:-700000}
size_mb=${SIZE_MB:-1024}
runs=${RUNS:-3}
dir=${1:-$(mktemp -d /var/tmp/oncepay-restore.XXXXXX)}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
bin=$dir/oncepay
token=bench-restore-admin-token-0123456789abcdef

CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin" .

# url_of FILE waits for the line in FILE that says where oncepay listens
# (serve's "listening" log line, demo's first line) and prints the URL.
url_of() {
  for _ in $(seq 300); do
    url=$(grep -m 1 -E "listening|oncepay demo:" "$1" 2>/dev/null | grep -oE "http://[0-9.:]+" || true)
    if [ -n "$url" ]; then echo "$url"; return; fi
    sleep 0.1
  done
  echo "no listening line in $1" >&2
  cat "$1" >&2
  return 1
}

# stop PID sends SIGTERM and waits; a non-zero exit is an error.
stop() { kill -TERM "$1"; wait "$1"; }

bytes() { stat -c %s "$1"; }

# since T prints the seconds from the time T (date +%s.%N) to now.
since() { awk -v t="$1" -v now="$(date +%s.%N)" 'BEGIN { printf "%.2f", now - t }'; }

fill=${FILL_BIN:-$bin}
fill_help=$("$fill" bench fill --help 2>&1 || true) # --help exits 2
if [ ! -e "$dir/big.db" ] && grep -q -- --payments <<<"$fill_help"; then
  echo "fill: $payments payments into $dir/big.db with bench fill"
  "$fill" bench fill --db "$dir/big.db" --payments "$payments" \
    --live-keys $((payments / 10)) --unpurged $((payments / 10)) >/dev/null
elif [ ! -e "$dir/big.db" ]; then
  echo "fill: $dir/big.db to $size_mb MB over HTTP"
  # Its log has a line per request: only its first line, the URL, is kept.
  "$fill" demo --addr 127.0.0.1:0 --db "$dir/big.db" >"$dir/demo.out" 2>/dev/null &
  demo=$!
  url=$(url_of "$dir/demo.out")
  while [ $(( $(bytes "$dir/big.db") + $(bytes "$dir/big.db-wal" 2>/dev/null || echo 0) )) -lt $(( size_mb << 20 )) ]; do
    "$fill" bench --url "$url" --scenario new --connections 32 --duration 60s | grep -E '^new|ledger'
  done
  stop "$demo"
fi
echo "database: $(bytes "$dir/big.db") bytes"

if [ ! -e "$dir/replica" ]; then
  echo "replicate: $dir/big.db to file://$dir/replica"
  start=$(date +%s.%N)
  ONCEPAY_ADMIN_TOKEN=$token "$bin" serve --addr 127.0.0.1:0 --db "$dir/big.db" \
    --replica "file://$dir/replica" 2>"$dir/serve.log" &
  serve=$!
  url=$(url_of "$dir/serve.log")
  # The first sync ships the whole file; its end is the first non-zero
  # last-sync timestamp.
  until curl -sf -H "Authorization: Bearer $token" "$url/metrics" |
    grep -Eq '^oncepay_replica_last_sync_timestamp_seconds [1-9]'; do
    sleep 0.5
  done
  echo "first sync done after $(since "$start") s (from the start of serve)"
  stop "$serve"
  echo "replica: $(du -sb "$dir/replica" | cut -f1) bytes in $(find "$dir/replica" -type f | wc -l) files"
fi

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(date -u +%Y-%m-%dT%H:%MZ)"
for i in $(seq "$runs"); do
  rm -f "$dir"/new.db*
  sync
  TIMEFORMAT="restore $i: %R s wall, %U s user and %S s system CPU"
  time "$bin" restore --from "file://$dir/replica" --to "$dir/new.db" >/dev/null
done
echo "restored: $(bytes "$dir/new.db") bytes"
rm -f "$dir"/new.db*
