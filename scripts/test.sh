#!/usr/bin/env bash
# The test suite: installs what the tests need when it is missing, then runs
# every test under the race detector. Works on a fresh Debian machine with Go.
set -euo pipefail
cd "$(dirname "$0")/.."

# The browser tests drive Debian's Chromium and the model check runs spin;
# install whichever is missing, with one apt-get update.
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v spin >/dev/null 2>&1 || missing+=(spin)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
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
go test -race -count=1 -timeout 20m ./... "$@"
