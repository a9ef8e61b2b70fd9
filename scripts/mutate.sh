#!/usr/bin/env bash
# Mutation testing of the mechanism: gremlins makes one small change at a
# time (a flipped condition, a shifted boundary, an arithmetic swap) in the
# packages named (default: payment sqlitestore server) and runs the tests
# against each mutant; a mutant the tests do not notice "lives". Slow, so CI
# does not run it; TESTING.md keeps the last result.
#
#   scripts/mutate.sh                 each mutant against the whole module's
#                                     tests (crash suite in its short form)
#   scripts/mutate.sh --quick [PKG]   each mutant against its package's tests
#
# Results: one line of efficacy per package, and a JSON report per package
# in ${MUTATE_OUT:-mutation}/.
#
# gremlins changes operators in Go code, never the SQL inside a string (a
# FOR UPDATE, a fence or a scope in a WHERE) nor a whole check:
# scripts/mutants.sh runs hand-made mutants of those guards
# (scripts/mutants/*.patch), each against the test it names.
set -euo pipefail
cd "$(dirname "$0")/.."

gremlins_version=v0.6.0
gremlins=$(go env GOPATH)/bin/gremlins
if ! "$gremlins" --version 2>/dev/null | grep -q "${gremlins_version#v}"; then
  go install "github.com/go-gremlins/gremlins/cmd/gremlins@$gremlins_version"
fi

mode=(--integration --coverpkg ./... --tags mutation)
if [ "${1:-}" = "--quick" ]; then
  mode=()
  shift
fi
out=${MUTATE_OUT:-mutation}
mkdir -p "$out"
for pkg in "${@:-payment sqlitestore server}"; do
  for p in $pkg; do
    name=${p//\//-} # internal/replaycache -> internal-replaycache
    "$gremlins" unleash "${mode[@]}" --workers 1 --timeout-coefficient 30 \
      --output "$out/$name.json" "./$p" >"$out/$name.log" 2>&1 || true
    printf '%-12s %s\n' "$p" "$(grep -E '^(Killed|Test efficacy|Mutator coverage)' "$out/$name.log" | tr '\n' ' ')"
    grep -E 'LIVED' "$out/$name.log" | sed 's/^/  /' || true
  done
done
