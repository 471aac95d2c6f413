#!/usr/bin/env bash
# Install the npm packages of faultstream's foreign-consumer contract checks:
#
# * deploy/contract/          ajv + ajv-formats, @asyncapi/parser, kafkajs, lossless-json
#                             (validate.mjs, asyncapi-check.mjs)
# * examples/consumers/node/  the example Node consumer (kafkajs, lossless-json)
#
# Each project's `npm ci` (exact versions and integrity hashes of its committed
# package-lock.json, install scripts off) runs into the git-ignored state directory
# `.state/contract/<project>/node_modules` (FAULTSTREAM_CONTRACT_STATE overrides `.state/contract`),
# and `<project>/node_modules` is a symlink to it, so `node <project>/x.mjs` resolves the
# packages as usual. Cached: a project whose lock file's SHA-256 equals the one recorded by
# the last successful install is skipped. Idempotent and safe to run concurrently (flock).
#
# Needs Node.js >= 20 with npm on PATH, and the npm registry (registry.npmjs.org or the
# configured one) on the first run. Exit status non-zero with a message on stderr when a
# step fails.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
STATE=${FAULTSTREAM_CONTRACT_STATE:-$REPO/.state/contract}
say() { echo "[contract-setup] $*"; }
die() { echo "[contract-setup] error: $*" >&2; exit 1; }

command -v node >/dev/null 2>&1 || die "node not found on PATH: the contract checks need Node.js >= 20"
command -v npm >/dev/null 2>&1 || die "npm not found on PATH: the contract checks need npm (Node.js >= 20)"
major=$(node -p 'process.versions.node.split(".")[0]')
((major >= 20)) || die "Node.js $(node --version) is too old: the contract checks need Node.js >= 20"

mkdir -p "$STATE"
exec 9>"$STATE/.setup.lock"
flock 9

# install <project dir> <name under $STATE>
install() {
    local project=$1 name=$2
    local target=$STATE/$name
    local want have=""
    [ -f "$project/package-lock.json" ] || die "$project/package-lock.json is missing"
    want=$(sha256sum "$project/package-lock.json" | cut -d' ' -f1)
    [ -f "$target/.lock-sha256" ] && have=$(cat "$target/.lock-sha256")
    if [ "$want" = "$have" ] && [ -d "$target/node_modules" ]; then
        say "$name: up to date (lock $want)"
    else
        say "$name: npm ci (lock $want)"
        rm -f "$target/.lock-sha256"
        mkdir -p "$target"
        cp "$project/package.json" "$project/package-lock.json" "$target/"
        # no install scripts: every package here is plain JavaScript (and one dependency's
        # postinstall only sends usage analytics)
        if ! (cd "$target" && SCARF_ANALYTICS=false npm ci --ignore-scripts --no-audit --no-fund \
                --loglevel=error >"$target/npm-ci.log" 2>&1); then
            tail -40 "$target/npm-ci.log" >&2
            die "$name: npm ci failed (log: $target/npm-ci.log)"
        fi
        echo "$want" >"$target/.lock-sha256"
    fi
    # <project>/node_modules -> the installed tree (replaced when it points elsewhere)
    local link=$project/node_modules
    if [ -L "$link" ] && [ "$(readlink "$link")" = "$target/node_modules" ]; then
        return
    fi
    if [ -e "$link" ] && [ ! -L "$link" ]; then
        die "$link exists and is not a symlink: remove it (the packages live in $target/node_modules)"
    fi
    ln -sfn "$target/node_modules" "$link"
}

install "$HERE" deploy-contract
install "$REPO/examples/consumers/node" example-consumer-node
say "ready: node $(node --version), packages under $STATE"
