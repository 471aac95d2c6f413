#!/usr/bin/env bash
# Install Prometheus (Debian 12's package, 2.42) for faultstream's Prometheus connector tests.
#
# The tests start their own Prometheus server (loopback, a free port, a temporary storage
# directory, tests/connectors/test_prometheus_connector.py); this script only makes sure the
# binary is there. Idempotent: does nothing when `prometheus --version` already works; never
# starts the packaged service (no init system here: a policy-rc.d keeps the package scripts
# from starting it, only for this install). Run as root.
# Exit status non-zero, with a message on stderr, when the install fails.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../apt.sh"   # apt_install

say() { echo "[prometheus-setup $(date +%H:%M:%S)] $*"; }
BIN=${PROMETHEUS_BIN:-prometheus}

if command -v "$BIN" >/dev/null 2>&1 && "$BIN" --version >/dev/null 2>&1; then
    say "$("$BIN" --version 2>&1 | head -1)"
    exit 0
fi

say "installing Debian package prometheus"
apt_install prometheus

if ! command -v prometheus >/dev/null 2>&1; then
    echo "prometheus-setup: the package installed no prometheus binary on PATH" >&2
    exit 1
fi
say "$(prometheus --version 2>&1 | head -1)"
