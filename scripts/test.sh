#!/usr/bin/env bash
# The test suite: installs what the tests need when it is missing, then runs
# every test under the race detector. Works on a fresh Debian machine with Go.
set -euo pipefail
cd "$(dirname "$0")/.."

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"

# The browser tests drive Debian's Chromium and the model check runs spin;
# the edge builds' test (crashtest.TestEdgeBuilds) runs the arm64 and arm/v7
# binaries under qemu-user, and scripts/release.sh, which makes them, checks
# each with readelf (binutils). Install whichever is missing, with one
# apt-get update.
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v spin >/dev/null 2>&1 || missing+=(spin)
{ command -v qemu-aarch64-static && command -v qemu-arm-static; } >/dev/null 2>&1 || missing+=(qemu-user-static)
command -v readelf >/dev/null 2>&1 || missing+=(binutils)
if [ ${#missing[@]} -gt 0 ]; then
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The PostgreSQL tests run against ONCEPAY_TEST_POSTGRES (a postgres:// URL
# of a role that may create databases). Without one, a throwaway server from
# Debian's packages: initdb in a temporary directory as an unprivileged user,
# listening on a socket there only (no port to collide with), removed on
# exit. It is a test server: fsync is off.
pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1; }
if [ -z "${ONCEPAY_TEST_POSTGRES:-}" ]; then
  if [ ! -x "$(pg_bin)/initdb" ]; then
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >/dev/null
  fi
  pgbin=$(pg_bin)
  pgdir=$(mktemp -d /tmp/oncepay-pg.XXXXXX)
  as_pg=()
  if [ "$(id -u)" -eq 0 ]; then # PostgreSQL refuses to run as root
    chown postgres "$pgdir"
    as_pg=(runuser -u postgres --)
  fi
  "${as_pg[@]}" "$pgbin/initdb" -D "$pgdir/data" -U postgres -A trust --no-sync >/dev/null
  "${as_pg[@]}" "$pgbin/pg_ctl" -D "$pgdir/data" -l "$pgdir/log" -w -s \
    -o "-c listen_addresses='' -k $pgdir -c max_connections=400 -c fsync=off -c full_page_writes=off" start
  trap '"${as_pg[@]}" "$pgbin/pg_ctl" -D "$pgdir/data" -m immediate -s stop; rm -rf "$pgdir"' EXIT
  export ONCEPAY_TEST_POSTGRES="postgres://postgres@/postgres?host=$pgdir"
fi

# The Stripe provider's tests run against stripe-mock; install it when it is missing.
if ! command -v stripe-mock >/dev/null 2>&1 && [ ! -x "$(go env GOPATH)/bin/stripe-mock" ]; then
  CGO_ENABLED=0 go install github.com/stripe/stripe-mock@v0.203.0
fi

export CGO_ENABLED=1 # the race detector needs cgo; the binary itself never does
go vet ./...
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change: $unformatted" >&2
  exit 1
fi
CGO_ENABLED=0 go build -o /dev/null .
# 30m, not 20m: on a cold build cache crashtest.TestEdgeBuilds compiles
# everything twice more (arm64, arm/v7), 12 minutes on a busy 2-core machine.
go test -race -count=1 -timeout 30m ./... "$@"
