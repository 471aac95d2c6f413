#!/usr/bin/env bash
# Debian's Chromium for the browser tests of the incident explorer and the HTML report
# (tests/streams/test_ui.py, tests/streams/test_report.py, marker `browser`). Playwright for
# Python drives it through executable_path=/usr/bin/chromium; `playwright install` (which
# downloads its own build) is never used. Idempotent: does nothing when /usr/bin/chromium
# exists. Needs root (apt-get) on a machine without it.
set -euo pipefail

if [ -x /usr/bin/chromium ]; then
    echo "chromium: $(/usr/bin/chromium --version 2>/dev/null || echo present) at /usr/bin/chromium"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "error: /usr/bin/chromium is missing and installing it (apt-get install chromium) needs root" >&2
    exit 1
fi
apt-get update -qq
# fonts-liberation: metric-compatible sans/serif/mono, so screenshots do not depend on which
# fonts the machine happens to have
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-liberation
/usr/bin/chromium --version
