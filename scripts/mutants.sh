#!/usr/bin/env bash
# Hand-made semantic mutants: each scripts/mutants/NAME.patch breaks one
# guard the way a plausible bug would (a lock, a fence, a scope, a check
# dropped) and names, in its header, the test that must notice:
#
#   Package: ./pgstore
#   Run: ^TestContract$/^OfflineTotalRace$
#
# For each mutant: apply it, run that test, expect it to fail, revert. One
# whose test passes lives. First each named test runs on the tree as it is,
# and must pass: a test that fails anyway kills nothing. The tree is
# restored on any exit, Ctrl-C included; a patch whose files have changes
# not committed is refused, so nothing of yours is touched.
#
#   scripts/mutants.sh            every mutant
#   scripts/mutants.sh NAME...    the named ones (file names without .patch)
#
# The PostgreSQL mutants run against ONCEPAY_TEST_POSTGRES; without it, a
# throwaway server as scripts/test.sh starts one. gremlins' generated
# mutants are scripts/mutate.sh's; TESTING.md has both scores.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=scripts/mutants
if [ $# -gt 0 ]; then
  patches=()
  for name in "$@"; do patches+=("$dir/${name%.patch}.patch"); done
else
  patches=("$dir"/*.patch)
fi

applied=""
pgdir=""
# applied is set before a patch is applied and cleared after it is
# reverted, so an interrupt at either edge finds it; a patch that would
# still apply is not in the tree.
restore() {
  if [ -n "$applied" ] && ! git apply --check "$applied" 2>/dev/null; then
    if git apply -R "$applied"; then
      echo "restored the tree: $applied reverted" >&2
    else
      echo "COULD NOT REVERT $applied: restore its files by hand (git diff)" >&2
    fi
  fi
  applied=""
  if [ -n "$pgdir" ]; then
    "${as_pg[@]}" "$pgbin/pg_ctl" -D "$pgdir/data" -m immediate -s stop || true
    rm -rf "$pgdir"
    pgdir=""
  fi
}
# A test runs in a process group of its own (see run), so that an
# interrupt stops it here, and is not taken for the test failing.
test_group=""
stop() {
  [ -z "$test_group" ] || kill -TERM -- "-$test_group" 2>/dev/null || true
  wait 2>/dev/null || true
  exit "$1"
}
trap restore EXIT
trap 'stop 130' INT
trap 'stop 143' TERM

header() { sed -n "s/^$2: //p" "$1" | head -n 1; }

# Every patch must apply to the tree as it is, on files with nothing
# uncommitted, and name its test.
needs_pg=false
for p in "${patches[@]}"; do
  [ -f "$p" ] || { echo "$p: no such mutant" >&2; exit 2; }
  if [ -z "$(header "$p" Package)" ] || [ -z "$(header "$p" Run)" ]; then
    echo "$p: no Package: or Run: line" >&2
    exit 2
  fi
  files=$(git apply --numstat "$p" | cut -f3)
  if ! git diff --quiet HEAD -- $files; then
    echo "$p: $files changed and not committed; commit or stash first" >&2
    exit 2
  fi
  if ! git apply --check "$p" 2>/dev/null; then
    echo "$p: does not apply to this tree: the code it mutates moved; remake it" >&2
    exit 2
  fi
  [ "$(header "$p" Package)" = ./pgstore ] && needs_pg=true
done

if $needs_pg && [ -z "${ONCEPAY_TEST_POSTGRES:-}" ]; then
  pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ ! -x "$pgbin/initdb" ]; then
    echo "no PostgreSQL: install Debian's postgresql, or set ONCEPAY_TEST_POSTGRES" >&2
    exit 2
  fi
  pgdir=$(mktemp -d /tmp/oncepay-pg.XXXXXX)
  as_pg=()
  if [ "$(id -u)" -eq 0 ]; then # PostgreSQL refuses to run as root
    chown postgres "$pgdir"
    as_pg=(runuser -u postgres --)
  fi
  "${as_pg[@]}" "$pgbin/initdb" -D "$pgdir/data" -U postgres -A trust --no-sync >/dev/null
  "${as_pg[@]}" "$pgbin/pg_ctl" -D "$pgdir/data" -l "$pgdir/log" -w -s \
    -o "-c listen_addresses='' -k $pgdir -c max_connections=400 -c fsync=off -c full_page_writes=off" start
  export ONCEPAY_TEST_POSTGRES="postgres://postgres@/postgres?host=$pgdir"
fi
export CI=true # no PostgreSQL test may skip and so pass

out=$(mktemp -d /tmp/oncepay-mutants.XXXXXX)
run() {
  setsid go test -count=1 -timeout 10m -run "$(header "$1" Run)" "$(header "$1" Package)" >"$2" 2>&1 &
  test_group=$!
  local rc=0
  wait "$test_group" || rc=$?
  test_group=""
  return "$rc"
}

# The named tests on the tree as it is: each must pass.
echo "running each mutant's test on the tree as it is first" >&2
declare -A baseline=()
for p in "${patches[@]}"; do
  key="$(header "$p" Package) $(header "$p" Run)"
  [ -n "${baseline[$key]:-}" ] && continue
  if run "$p" "$out/baseline.log"; then
    baseline[$key]=pass
  else
    echo "the test of $p fails without the mutant: $key" >&2
    cat "$out/baseline.log" >&2
    exit 1
  fi
done

killed=0
lived=()
for p in "${patches[@]}"; do
  name=$(basename "$p" .patch)
  applied=$p
  git apply "$p"
  if run "$p" "$out/$name.log"; then
    status=LIVED
    lived+=("$name")
  elif grep -q '\[build failed\]\|\[setup failed\]' "$out/$name.log"; then
    status="DOES NOT BUILD"
    lived+=("$name")
  else
    status=killed
    killed=$((killed + 1))
  fi
  git apply -R "$p"
  applied=""
  printf '%-40s %-8s %s %s\n' "$name" "$status" "$(header "$p" Package)" "$(header "$p" Run)"
done

total=${#patches[@]}
printf '\n%d of %d killed (%d%%); logs in %s\n' "$killed" "$total" $((100 * killed / total)) "$out"
if [ ${#lived[@]} -gt 0 ]; then
  printf 'not killed: %s\n' "${lived[*]}"
  exit 1
fi
