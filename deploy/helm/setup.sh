#!/usr/bin/env bash
# Build and cache helm for the chart tests (tests/deploy/test_helm_chart.py):
#   - helm (helm.sh/helm/v3/cmd/helm at $HELM_VERSION) from the Go module proxy
# into .state/kubernetes/bin/, beside the kubectl that deploy/kubernetes/setup.sh builds. The Go
# caches are the same as that script's (.state/kubernetes/{gocache,gomodcache}); helm v3.18
# builds against k8s.io client-go v0.33, the modules kubectl v1.33 already brought in, so a
# build after deploy/kubernetes/setup.sh reuses most of them. Idempotent: a helm whose stamp
# file (helm.version) names the pinned version is not built again. After deploy/kubernetes/setup.sh
# a build takes about 70 s on 2 cores (47 modules downloaded). Exit status non-zero (message on
# stderr) when a step fails.
set -euo pipefail

HELM_VERSION=${HELM_VERSION:-v3.18.6}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
STATE=${FAULTSTREAM_K8S_STATE:-$ROOT/.state/kubernetes}
BIN=$STATE/bin
mkdir -p "$BIN" "$STATE/gocache" "$STATE/gomodcache"
say() { echo "[helm-setup $(date +%H:%M:%S)] $*"; }

export GOCACHE=$STATE/gocache GOMODCACHE=$STATE/gomodcache GOFLAGS=-trimpath GOTOOLCHAIN=local
export CGO_ENABLED=0

if [ -x "$BIN/helm" ] && [ "$(cat "$BIN/helm.version" 2>/dev/null)" = "$HELM_VERSION" ]; then
    say "helm $HELM_VERSION already built"
else
    say "building helm $HELM_VERSION"
    # helm's own version string comes from these link-time variables (helm version --short).
    ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
    ldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
    GOBIN=$BIN go install -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
    echo "$HELM_VERSION" > "$BIN/helm.version"
fi
[ -x "$BIN/helm" ] || { echo "helm-setup: $BIN/helm missing after the build" >&2; exit 1; }
say "ready: helm $("$BIN/helm" version --short), bin $BIN"
