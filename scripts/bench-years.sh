#!/usr/bin/env bash
# BENCHMARKS.md's "Years on one file": the same load on a nearly empty file
# and on a large filled one (oncepay bench fill), in one run: new payments
# and replays over HTTP (wrk: rate and p99; replays of the last 1,000 kept
# keys and of every kept key, with the replay cache and without), the admin
# list and search and GET /v1/payments (p99 of 200 requests each, first and
# deep pages, curl's time on loopback), then new payments with no purge,
# beside a purge in whole batches, and beside one in batches bounded by
# time, and the file's size before and after.
#
#   scripts/bench-years.sh                  fill both files itself
#   BIG=/path/big.db KEYS=/path/keys.txt scripts/bench-years.sh
#                                           a file filled before (bench fill's
#                                           output in KEYS), with its sizes
#   PAYMENTS, LIVE, UNPURGED: the big fill's sizes (default 1M, 300k, 300k)
#   PG=postgres://... scripts/bench-years.sh
#                                           fill that (empty) PostgreSQL database
#                                           instead, and measure it alone
#   PURGE_ONLY=1 BIG=... KEYS=... scripts/bench-years.sh
#                                           only the purge beside new payments,
#                                           on that file (MODES: which of none,
#                                           whole, bounded, in that order; BOUND:
#                                           the bounded mode's --purge-batch-time,
#                                           default 10ms, serve's; PURGE_FLAGS: more serve
#                                           flags for all three, e.g. --retention 8h
#                                           to give the purge more records)
#   ONCEPAY=/path/to/oncepay                that binary, not one built from here
#                                           (to compare two builds on copies of
#                                           one file, run after run)
#   PG=postgres://... KEYS=/path/keys.txt scripts/bench-years.sh
#                                           one filled before, with its sizes
#
# The big file is changed: vacuumed if it is not INCREMENTAL yet (timed),
# then purged. Load runs last DURATION seconds (default 30).
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${DURATION:-30}
payments=${PAYMENTS:-1000000}
live=${LIVE:-300000}
unpurged=${UNPURGED:-300000}
merchants=10
if ! command -v wrk >/dev/null || ! command -v sqlite3 >/dev/null; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq wrk sqlite3 >/dev/null
fi
work=${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/oncepay-years.XXXXXX")}
mkdir -p "$work"
trap 'kill $(cat "$work/pid" 2>/dev/null) 2>/dev/null || true' EXIT
if [ -n "${ONCEPAY:-}" ]; then
  cp "$ONCEPAY" "$work/oncepay"
else
  CGO_ENABLED=0 go build -o "$work/oncepay" .
fi
token=$(head -c 32 /dev/urandom | base64 | tr -d '\n')
echo "# $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, $(lscpu | awk -F: '/Model name/{gsub(/^ +/, "", $2); print $2}'), load $(cut -d' ' -f1-3 /proc/loadavg)"

cat >"$work/new.lua" <<'EOF'
-- a new payment per request: a fresh Idempotency-Key each time
local n, threads = 0, 0
function setup(thread) threads = threads + 1; thread:set("tid", threads) end
function init(args) prefix, secret = args[1] .. "-" .. tid, args[2] end
function request()
  n = n + 1
  return wrk.format("POST", "/v1/payments", {["Content-Type"] = "application/json",
    ["Authorization"] = "Bearer " .. secret, ["Idempotency-Key"] = prefix .. "-" .. n},
    '{"amount":1000,"currency":"USD","source":"tok_visa"}')
end
EOF
cat >"$work/replay.lua" <<'EOF'
-- a replay of a filled live key, picked at random: payment.FillKey and
-- payment.FillRequest, the merchant i % merchants
function init(args)
  first, count, secrets = tonumber(args[1]), tonumber(args[2]), {}
  for i = 3, #args do secrets[#secrets + 1] = args[i] end
  math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16))
end
function request()
  local i = first + math.random(0, count - 1)
  local amount = 100 + (i * 7919) % 99900
  local token = (i % 20 == 7) and "tok_chargeDeclined" or "tok_visa"
  return wrk.format("POST", "/v1/payments", {["Content-Type"] = "application/json",
    ["Authorization"] = "Bearer " .. secrets[i % #secrets + 1], ["Idempotency-Key"] = "fill-" .. i},
    string.format('{"amount":%d,"currency":"usd","source":"%s","description":"Order %d","metadata":{"order":"%d"}}', amount, token, i, i))
end
EOF

# serve FILE [FLAGS...]: start serve on FILE, wait until it answers.
serve() {
  local db=$1; shift
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  ONCEPAY_ADMIN_TOKEN=$token "$work/oncepay" serve --addr "127.0.0.1:$port" --db "$db" \
    --sim-db "$work/sim-$(basename "${db%%\?*}").db" "$@" 2>>"$work/log-$(basename "$db")" &
  pid=$!
  echo "$pid" >"$work/pid"
  until curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; do
    kill -0 "$pid" 2>/dev/null || { tail "$work/log-$(basename "$db")" >&2; exit 1; }
    sleep 0.2
  done
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; : >"$work/pid"; }

# load NAME SCRIPT ARGS...: one wrk run; prints rate, p99, errors.
load() {
  local name=$1 script=$2; shift 2
  local out
  out=$(wrk -t2 -c32 -d"${duration}s" --latency -s "$work/$script" "http://127.0.0.1:$port/" -- "$@")
  printf '  %-28s %8s req/s  p99 %8s  non-2xx %s\n' "$name" "$(awk '/^Requests\/sec/{printf "%.0f", $2}' <<<"$out")" \
    "$(awk '$1 == "99%" {print $2}' <<<"$out")" "$(awk '/Non-2xx/{print $NF}' <<<"$out" | grep . || echo 0)"
}

# p99 NAME AUTH PATH: curl's time of 200 GETs, p50 and p99 in ms, then the
# server's own (its request log's duration_ms).
p99() {
  local name=$1 auth=$2 path=$3 log from
  log=$work/log-$(basename "$db")
  from=$(wc -l <"$log")
  for _ in $(seq 200); do
    curl -s -o /dev/null -w '%{http_code} %{time_total}\n' -H "Authorization: Bearer $auth" "http://127.0.0.1:$port$path"
  done | sort -k2 -n | awk -v n="$name" '{c[NR] = $1; t[NR] = $2} END {
    bad = 0; for (i = 1; i <= NR; i++) if (c[i] != 200) bad++
    printf "  %-28s p50 %6.1f ms  p99 %6.1f ms  (non-200: %d)", n, t[int(NR * 0.5)] * 1000, t[int(NR * 0.99)] * 1000, bad }'
  tail -n +"$((from + 1))" "$log" | grep '"msg":"request".*"method":"GET"' | grep -o '"duration_ms":[0-9.e+-]*' | cut -d: -f2 |
    sort -g | awk '{t[NR] = $1} END {printf "  server p50 %6.1f ms  p99 %6.1f ms\n", t[int(NR * 0.5)], t[int(NR * 0.99)]}'
}

size() { stat -c %s "$1"; }
# sql DB QUERY: one value from the database, SQLite file or postgres:// URL.
sql() {
  case $1 in
  postgres://*) psql -qAt "$1" -c "$2" ;;
  *) sqlite3 "$1" "$2" ;;
  esac
}
# checkpoint DB: SQLite's WAL folded into the file, so its size is the file's.
checkpoint() { case $1 in postgres://*) ;; *) sqlite3 "$1" 'PRAGMA wal_checkpoint(TRUNCATE)' >/dev/null ;; esac; }
# dbsize DB: the file's bytes, or the PostgreSQL database's.
dbsize() {
  case $1 in
  postgres://*) sql "$1" 'SELECT pg_database_size(current_database())' ;;
  *) size "$1" ;;
  esac
}
mb() { awk -v b="$1" 'BEGIN{printf "%.0f MB", b / 1048576}'; }

# replays FIRST COUNT [SUFFIX]: replays of the last 1,000 kept keys (the
# same working set on every file: a retry comes while its answer is recent),
# then, if there are more, of every kept key at random (a working set larger
# than any cache).
replays() {
  local first=$1 count=$2 suffix=${3:-} last=$(($2 < 1000 ? $2 : 1000))
  load "replays, $last keys$suffix" replay.lua "$((first + count - last))" "$last" "${secrets[@]}"
  if [ "$count" -gt "$last" ]; then
    load "replays, $count keys$suffix" replay.lua "$first" "$count" "${secrets[@]}"
  fi
}

# measure FILE KEYS FIRST_LIVE: the load, the pages, then the purge.
measure() {
  local db=$1 keys=$2 first=$3 count=$4
  local secret scope
  mapfile -t secrets < <(awk '{print $2}' "$keys")
  scope=$(awk 'NR == 1 {print $1}' "$keys")
  secret=${secrets[0]}
  checkpoint "$db"
  echo "  database $(mb "$(dbsize "$db")"): $(sql "$db" "SELECT (SELECT count(*) FROM payments) || ' payments, ' || (SELECT count(*) FROM payment_attempts) || ' kept keys, ' || (SELECT count(*) FROM expired_keys) || ' expired keys, ' || (SELECT count(*) FROM events) || ' events'")"
  serve "$db" --purge-schedule off
  load "new payments" new.lua "n$RANDOM$RANDOM" "$secret"
  replays "$first" "$count"
  local deep deeppay
  deep=$(sql "$db" "SELECT created_at || '.' || id FROM payment_attempts ORDER BY created_at LIMIT 1 OFFSET 1000")
  deeppay=$(sql "$db" "SELECT id FROM payments WHERE scope = '$scope' ORDER BY id LIMIT 1 OFFSET 1000")
  p99 "admin list, first page" "$token" "/admin"
  p99 "admin list, deep page" "$token" "/admin?before=$deep"
  p99 "admin list, failed" "$token" "/admin?status=failed"
  p99 "admin search, a key" "$token" "/admin?q=fill-$((first + count / 2))"
  p99 "GET /v1/payments, first" "$secret" "/v1/payments?limit=100"
  p99 "GET /v1/payments, deep" "$secret" "/v1/payments?limit=100&starting_after=$deeppay"
  p99 "GET /v1/events, first" "$secret" "/v1/events?limit=100"
  stop
  # The same replays with no answer cached: each read from the table.
  serve "$db" --purge-schedule off --replay-cache-mb 0
  replays "$first" "$count" ", no cache"
  stop
  purges "$db" "$keys"
}

# purges FILE KEYS: new payments beside the purge, one after another on
# the same file: none, whole batches of 1,000, batches bounded by BOUND
# (10 ms, the default); the purge's summary, and the file's size before and after.
purges() {
  local db=$1 secret before mode
  secret=$(awk 'NR == 1 {print $2}' "$2")
  checkpoint "$db"
  before=$(dbsize "$db")
  for mode in ${MODES:-none whole bounded}; do
    case $mode in
    none) serve "$db" --purge-schedule off ${PURGE_FLAGS:-} ;;
    whole) serve "$db" --purge-schedule "@every 3s" --purge-batch-time -1ns ${PURGE_FLAGS:-} ;;
    bounded) serve "$db" --purge-schedule "@every 3s" --purge-batch-time "${BOUND:-10ms}" ${PURGE_FLAGS:-} ;;
    esac
    : >"$work/log-$(basename "$db")"
    load "new payments, purge $mode" new.lua "p$mode$RANDOM" "$secret"
    stop
    echo "    $(grep -o '"result":"purge: deleted [1-9][^"]*"' "$work/log-$(basename "$db")" | head -1)"
  done
  checkpoint "$db"
  echo "  database $(mb "$before") before the purges, $(mb "$(dbsize "$db")") after; kept keys now $(sql "$db" 'SELECT count(*) FROM payment_attempts')"
}

if [ -n "${PURGE_ONLY:-}" ]; then
  echo "the purge beside new payments, $BIG:"
  purges "$BIG" "$KEYS"
  exit 0
fi
small=$work/small.db
rm -f "$small"*
"$work/oncepay" bench fill --db "$small" --payments 2000 --live-keys 1000 --unpurged 500 --merchants $merchants >"$work/small-keys.txt" 2>/dev/null
if [ -n "${PG:-}" ]; then # PostgreSQL: the fill and the measures, nothing else
  echo "PostgreSQL ($(sql "$PG" 'SHOW server_version'), autovacuum $(sql "$PG" 'SHOW autovacuum'), scale factor $(sql "$PG" 'SHOW autovacuum_vacuum_scale_factor')):"
  if [ -z "${KEYS:-}" ]; then
    KEYS=$work/pg-keys.txt
    start=$(date +%s)
    "$work/oncepay" bench fill --db "$PG" --payments "$payments" --live-keys "$live" --unpurged "$unpurged" --merchants $merchants >"$KEYS"
    echo "fill: $payments payments in $(( $(date +%s) - start ))s"
  fi
  sql "$PG" 'ANALYZE' >/dev/null
  measure "$PG" "$KEYS" $((payments - live)) "$live"
  exit 0
fi
if [ -z "${BIG:-}" ]; then
  BIG=$work/big.db KEYS=$work/big-keys.txt
  rm -f "$BIG"*
  start=$(date +%s)
  "$work/oncepay" bench fill --db "$BIG" --payments "$payments" --live-keys "$live" --unpurged "$unpurged" --merchants $merchants >"$KEYS"
  echo "fill: $payments payments in $(( $(date +%s) - start ))s"
fi
if [ "$(sqlite3 "$BIG" 'PRAGMA auto_vacuum')" != 2 ]; then
  echo "vacuum (the migration of a file made before auto_vacuum=INCREMENTAL):"
  /usr/bin/time -f '  %e s wall, %M KB max RSS' "$work/oncepay" vacuum --db "$BIG" | sed 's/^/  /'
fi
echo "nearly empty file (2,000 payments, 1,000 kept keys, 500 past the retention):"
measure "$small" "$work/small-keys.txt" 1000 1000
echo "large file ($payments payments, $live kept keys, $unpurged past the retention):"
measure "$BIG" "$KEYS" $((payments - live)) "$live"
