#!/usr/bin/env bash
# Install Alertmanager (Debian 12's package prometheus-alertmanager, 0.25) for faultstream's
# alert sink tests.
#
# The test suite runs it once when a test needs Alertmanager (tests/setup_fixtures.py); the tests
# start their own server (loopback, a free port, a temporary storage directory,
# tests/sinks/test_alertmanager.py). This script only makes sure the binary is there.
# Idempotent: does nothing when `prometheus-alertmanager --version` already works; never starts
# the packaged service (a policy-rc.d keeps the package scripts from starting it, only for this
# install). Run as root. Exit status non-zero, with a message on stderr, when the install fails.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../apt.sh"   # apt_install

say() { echo "[alertmanager-setup $(date +%H:%M:%S)] $*"; }
BIN=${ALERTMANAGER_BIN:-prometheus-alertmanager}

if command -v "$BIN" >/dev/null 2>&1 && "$BIN" --version >/dev/null 2>&1; then
    say "$("$BIN" --version 2>&1 | head -1)"
    exit 0
fi

say "installing Debian package prometheus-alertmanager"
apt_install prometheus-alertmanager

if ! command -v prometheus-alertmanager >/dev/null 2>&1; then
    echo "alertmanager-setup: the package installed no prometheus-alertmanager binary on PATH" >&2
    exit 1
fi
say "$(prometheus-alertmanager --version 2>&1 | head -1)"
