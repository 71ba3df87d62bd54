#!/bin/bash
# Installs the Debian/Ubuntu packages the test services need (radosgw and its
# single-node Ceph, kcat for librdkafka's Kafka mock cluster), unless they are
# already there. Uses sudo when not run as root.
set -euo pipefail
PACKAGES=(kcat radosgw ceph-mon ceph-osd curl)
BINARIES=(kcat radosgw radosgw-admin ceph-mon ceph-osd ceph ceph-authtool monmaptool curl)
missing=()
for b in "${BINARIES[@]}"; do command -v "$b" >/dev/null 2>&1 || missing+=("$b"); done
if [ ${#missing[@]} -eq 0 ]; then
  echo "test services: all present (${BINARIES[*]})"
  exit 0
fi
echo "test services: missing ${missing[*]}; installing ${PACKAGES[*]} with apt-get"
SUDO=
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null 2>&1 || { echo "not root and no sudo: run as root: apt-get install -y --no-install-recommends ${PACKAGES[*]}" >&2; exit 1; }
  SUDO=sudo
fi
$SUDO apt-get update
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${PACKAGES[@]}"
