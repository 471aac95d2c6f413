#!/usr/bin/env bash
# What the local Kafka broker of the tests and the streaming quickstart needs: Java 17 and
# Maven (Debian's openjdk-17-jre-headless and maven, installed when `java` or `mvn` is missing;
# needs root then), and the broker's jars resolved by Maven into .state/kafka/libs
# (`python3 deploy/kafka/broker.py fetch`, which does nothing when they are there).
# Idempotent. Exit status non-zero (message on stderr) when a step fails.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
say() { echo "[kafka-setup $(date +%H:%M:%S)] $*"; }

if ! command -v java >/dev/null 2>&1 || ! command -v mvn >/dev/null 2>&1; then
    if [ "$(id -u)" != 0 ]; then
        echo "kafka-setup: java or mvn is missing and installing them (apt-get) needs root" >&2
        exit 1
    fi
    say "installing openjdk-17-jre-headless and maven"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless maven >/dev/null
fi
say "$(java -version 2>&1 | head -1)"
say "resolving the broker's jars into .state/kafka/libs (Maven; skipped when present)"
python3 "$ROOT/deploy/kafka/broker.py" fetch
say "ready: $(ls "$ROOT/.state/kafka/libs" | grep -c '\.jar$') jars"
