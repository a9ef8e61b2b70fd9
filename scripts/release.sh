#!/usr/bin/env bash
# Release builds: one static, stripped oncepay for each platform below, in
# dist/ (or $DIST), with their SHA-256 sums in SHA256SUMS (docs/edge.md).
#
#   scripts/release.sh            # version from "git describe"
#   VERSION=v1.2.0 scripts/release.sh
#
# Each binary is checked to be static: an ELF with no program interpreter
# (PT_INTERP) and no shared library, so it runs on any Linux of its
# architecture, a Raspberry Pi's included, with nothing installed.
set -euo pipefail
cd "$(dirname "$0")/.."

dist=${DIST:-dist}
version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo devel)}
# GOARCH/GOARM: linux/arm/v7 is GOARM=7 (Raspberry Pi 2 and later on a
# 32-bit OS, most ARM boards); a 64-bit OS on a Pi 3, 4 or 5 takes arm64.
platforms=(amd64 arm64 arm:7)

mkdir -p "$dist"
names=()
for p in "${platforms[@]}"; do
  arch=${p%%:*}
  goarm=""
  name=oncepay-linux-$arch
  if [ "$arch" != "$p" ]; then
    goarm=${p#*:}
    name=$name-v$goarm
  fi
  # No cgo (the SQLite driver is pure Go), so the binary is static; -trimpath
  # keeps the build machine's paths out; -s -w drop the symbol table and
  # DWARF (panics still print their stack traces).
  CGO_ENABLED=0 GOOS=linux GOARCH=$arch GOARM=$goarm \
    go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$dist/$name" .
  # readelf (binutils) reads the program headers: a dynamic binary has an
  # INTERP header naming its loader and NEEDED entries naming its libraries.
  if readelf -lW "$dist/$name" | grep -q INTERP || readelf -dW "$dist/$name" | grep -q NEEDED; then
    echo "release: $dist/$name is not static" >&2
    exit 1
  fi
  names+=("$name")
  printf '%-26s %9d bytes  %s\n' "$name" "$(stat -c %s "$dist/$name")" \
    "$(readelf -hW "$dist/$name" | sed -n 's/^ *Machine: *//p')"
done
(cd "$dist" && sha256sum "${names[@]}" >SHA256SUMS)
echo "oncepay $version: $dist/SHA256SUMS"
