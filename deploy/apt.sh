# Sourced by the setup scripts under deploy/: apt_install PACKAGE... installs Debian packages
# quietly without starting their services (no init system here): a policy-rc.d that refuses
# every start is in place during the install only (one that was there before is left as it
# was). Needs root; exits non-zero (set -e in the caller) when apt-get fails.

apt_install() {
    export DEBIAN_FRONTEND=noninteractive
    local made_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
        made_policy=1
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    apt-get update -qq
    apt-get install -y -q --no-install-recommends "$@" >/dev/null
    if ((made_policy)); then rm -f /usr/sbin/policy-rc.d; trap - EXIT; fi
}
