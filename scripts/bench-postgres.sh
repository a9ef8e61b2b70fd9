#!/usr/bin/env bash
# BENCHMARKS.md's PostgreSQL table: new payments over HTTP on SQLite, on
# PostgreSQL with one instance, and on PostgreSQL with three instances, in
# one run on this machine. PostgreSQL is a throwaway server from Debian's
# packages with its durable defaults (fsync on, synchronous_commit on), on
# the same disk as the SQLite file ($TMPDIR). Each instance serves the
# simulated provider in process; with three, three load tools run at once,
# one on each instance, with a third of the connections each.
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${DURATION:-10s}
conns=${CONNECTIONS:-64}

pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }
if [ ! -x "$(pg_bin)/initdb" ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >/dev/null
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/oncepay-bench.XXXXXX")
as_pg=()
if [ "$(id -u)" -eq 0 ]; then chown postgres "$work"; as_pg=(runuser -u postgres --); fi
cleanup() {
  [ -f "$work/pids" ] && kill $(cat "$work/pids") 2>/dev/null || true
  "${as_pg[@]}" "$(pg_bin)/pg_ctl" -D "$work/pg" -m fast -s stop 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
"${as_pg[@]}" "$(pg_bin)/initdb" -D "$work/pg" -U postgres -A trust >/dev/null
"${as_pg[@]}" "$(pg_bin)/pg_ctl" -D "$work/pg" -l "$work/pg.log" -w -s \
  -o "-c listen_addresses='' -k $work -c max_connections=200" start
pg="postgres://postgres@/postgres?host=$work"

CGO_ENABLED=0 go build -o "$work/oncepay" .
bin="$work/oncepay"
token=$(head -c 32 /dev/urandom | base64 | tr -d '\n')

# serve DB NAME: starts an instance on a free port; prints its URL.
serve() {
  local log="$work/$2.log"
  ONCEPAY_ADMIN_TOKEN=$token "$bin" serve --addr 127.0.0.1:0 --db "$1" --sim-db "$work/$2-sim.db" \
    --reconcile-schedule '@every 1m' --purge-schedule '@every 10m' >/dev/null 2>"$log" &
  echo $! >>"$work/pids"
  for _ in $(seq 100); do
    url=$(grep -o '"url":"http://[^"]*"' "$log" | head -n 1 | cut -d'"' -f4)
    [ -n "$url" ] && { echo "$url"; return; }
    sleep 0.1
  done
  echo "instance $2 did not start" >&2; cat "$log" >&2; exit 1
}

# bench URL DB CONNS: the "new" scenario against one instance.
bench() {
  local scope secret
  scope=$("$bin" merchant create bench --db "$2" | tail -n 1)
  secret=$("$bin" apikey create --merchant "$scope" --db "$2" | tail -n 1)
  "$bin" bench --url "$1" --api-key "$secret" --admin-token "$token" --scope "$scope" \
    --scenario new --duration "$duration" --connections "$3"
}

echo "== SQLite, one instance"
url=$(serve "$work/bench.db" sqlite)
bench "$url" "$work/bench.db" "$conns"

echo "== PostgreSQL, one instance"
url=$(serve "$pg" pg1)
bench "$url" "$pg" "$conns"

echo "== PostgreSQL, three instances at once"
urls=()
for i in 1 2 3; do urls+=("$(serve "$pg" "pg3-$i")"); done
for i in 0 1 2; do bench "${urls[$i]}" "$pg" $((conns / 3)) >"$work/bench3-$i.out" 2>&1 & done
wait
for i in 0 1 2; do echo "-- instance $((i + 1))"; cat "$work/bench3-$i.out"; done
