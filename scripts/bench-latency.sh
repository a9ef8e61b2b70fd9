#!/usr/bin/env bash
# BENCHMARKS.md's slow-bank table: new payments against `serve` whose
# simulated bank answers after 100 ms from 1,000 connections, beside the same
# server with a bank that answers at once from 64 connections (the
# side-by-side's load) and from 1,000, interleaved, each on fresh files.
# With a 100 ms bank, 1,000 connections can make at most 10,000 payments/s
# (Little's law), whatever the server. The load comes from wrk, which costs far
# less CPU a request than `oncepay bench`: on two cores the load tool's CPU
# is taken from the server, and a heavier one holds down the zero-latency
# figure more than the slow one. Besides the rate and p99 it reads the
# server's CPU from /proc, its peak RSS, and the writer's commits and mean
# batch from /metrics.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${DURATION:-5}   # seconds a run
rounds=${ROUNDS:-2}

if ! command -v wrk >/dev/null; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq wrk >/dev/null
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/oncepay-bench.XXXXXX")
trap 'kill $(cat "$work/pid" 2>/dev/null) 2>/dev/null || true; rm -rf "$work"' EXIT
CGO_ENABLED=0 go build -o "$work/oncepay" .
token=$(head -c 32 /dev/urandom | base64 | tr -d '\n')
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

# writer prints the writer's commits and writes so far.
writer() {
  curl -fsS -H "Authorization: Bearer $token" "http://127.0.0.1:$port/metrics" |
    awk '/^oncepay_store_(commits|writes)_total /{printf "%s ", $2}'
}

# run LATENCY CONNECTIONS: one run on fresh files; prints its row and keeps
# its rate.
run() {
  local dir="$work/$1-$2-$round"
  mkdir "$dir"
  local secret
  secret=$("$work/oncepay" apikey create bench --db "$dir/o.db" | tail -n 1)
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  ONCEPAY_ADMIN_TOKEN=$token "$work/oncepay" serve --addr "127.0.0.1:$port" --db "$dir/o.db" \
    --sim-db "$dir/sim.db" --sim-latency "$1" 2>"$dir/log" &
  local pid=$!
  echo "$pid" >"$work/pid"
  until curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; do
    kill -0 "$pid" 2>/dev/null || { cat "$dir/log" >&2; exit 1; } # it did not start
    sleep 0.1
  done
  local cpu0 cpu1 w0 w1 out
  cpu0=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  w0=$(writer)
  out=$(wrk -t2 -c"$2" -d"${duration}s" --latency -s "$work/new.lua" "http://127.0.0.1:$port/" -- "k$RANDOM$RANDOM" "$secret")
  cpu1=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  w1=$(writer)
  local rss rate
  rss=$(awk '/^VmHWM/{printf "%.0f", $2 / 1024}' "/proc/$pid/status")
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  : >"$work/pid" # nothing left for the exit trap to kill
  rate=$(awk '/^Requests\/sec/{printf "%.0f", $2}' <<<"$out")
  rates[$1-$2]+="$rate "
  printf '%-6s %6s %9s %8s %8s %8s %6s %10s %7s %7s\n' "$1" "$2" "$rate" \
    "$(awk '$1 == "99%" {print $2}' <<<"$out")" \
    "$(awk '/Non-2xx/{print $NF}' <<<"$out" | grep . || echo 0)" \
    "$(awk '/Socket errors/{gsub(",", ""); print $4 + $6 + $8 + $10}' <<<"$out" | grep . || echo 0)" \
    "$(awk -v a="$cpu0" -v b="$cpu1" -v t="$(getconf CLK_TCK)" -v d="$duration" 'BEGIN{printf "%.2f", (b - a) / t / d}')" \
    "$(awk -v d="$duration" '{printf "%.0f", ($3 - $1) / d}' <<<"$w0 $w1")" \
    "$(awk '{if ($3 > $1) printf "%.1f", ($4 - $2) / ($3 - $1); else print "-"}' <<<"$w0 $w1")" "$rss MB"
}

declare -A rates
echo "new payments, wrk -t2, ${duration} s a run, $(nproc) cores, $(date -u '+%a %b %-d %Y %H:%M UTC')"
printf '%-6s %6s %9s %8s %8s %8s %6s %10s %7s %7s\n' bank conns "req/s" p99 non-2xx "sock err" cores "commits/s" batch RSS
for round in $(seq "$rounds"); do
  run 0s 64
  run 0s 1000
  run 100ms 1000
done
awk -v s="${rates[100ms-1000]}" -v f="${rates[0s-64]}" -v t="${rates[0s-1000]}" 'BEGIN{
  n = split(s, x, " "); split(f, y, " "); split(t, z, " ")
  for (i = 1; i <= n; i++)
    printf "round %d: 100 ms bank, 1,000 connections = %.2fx the 64-connection zero-latency rate, %.2fx the 1,000-connection one\n", i, x[i] / y[i], x[i] / z[i] }'
