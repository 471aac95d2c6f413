#!/usr/bin/env bash
# Stop the test Slurm started by deploy/slurm/setup.sh: slurmd, slurmctld, slurmdbd, MariaDB and
# munged, each by the pid it wrote. Jobs still running are killed with slurmd.
set -uo pipefail
stop_pid() {  # name pidfile
    local pid
    [[ -s "$2" ]] || return 0
    pid=$(cat "$2")
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid"
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
        echo "stopped $1 ($pid)"
    fi
    rm -f "$2"
}
stop_pid slurmd /run/slurmd.pid
stop_pid slurmctld /run/slurmctld.pid
stop_pid slurmdbd /run/slurmdbd.pid
stop_pid mariadbd /run/mysqld/mysqld.pid
stop_pid munged /run/munge/munged.pid
