#!/usr/bin/env bash
# Start a real single-node Slurm 22.05 (Debian 12 packages) for faultstream's Slurm connector
# tests: munge, MariaDB + slurmdbd (sacct needs a database: Debian's 22.05 has no file-based
# accounting storage), slurmctld and slurmd, all on loopback, cluster "fs-test".
#
# Idempotent: installs missing packages, rewrites the config, starts only what is not running,
# then waits until `sinfo` shows the node idle. Run as root. Log of the daemons: /var/log/slurm.
# Exit status non-zero (with a message on stderr) when a step fails or the node never gets idle.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/../apt.sh"   # apt_install

CLUSTER=fs-test
CONF_DIR=/etc/slurm
LOG_DIR=/var/log/slurm
WAIT_S=${SLURM_SETUP_WAIT_S:-120}
say() { echo "[slurm-setup $(date +%H:%M:%S)] $*"; }

# ---- packages -------------------------------------------------------------------------------
need=()
for bin in slurmctld:slurmctld slurmd:slurmd slurmdbd:slurmdbd sbatch:slurm-client munged:munge \
           mariadbd:mariadb-server; do
    command -v "${bin%%:*}" >/dev/null 2>&1 || need+=("${bin##*:}")
done
if ((${#need[@]})); then
    say "installing ${need[*]}"
    apt_install slurmctld slurmd slurmdbd slurm-client munge mariadb-server mariadb-client
fi

NODE=$(slurmd -N "$(hostname -s)" -C 2>/dev/null | sed -n 's/^NodeName=\([^ ]*\).*/\1/p' | head -1)
NODE=${NODE:-$(hostname -s)}
MEM=$(awk '/MemTotal/ {print int($2/1024/2)}' /proc/meminfo)   # half the RAM, in MiB

# ---- config ---------------------------------------------------------------------------------
mkdir -p "$CONF_DIR" "$LOG_DIR" /var/spool/slurmctld /var/spool/slurmd /run/munge /var/lib/munge \
    /var/log/munge
cat > "$CONF_DIR/slurm.conf" <<CONF
# written by faultstream deploy/slurm/setup.sh
ClusterName=$CLUSTER
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
MinJobAge=300
KillWait=5
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
JobCompType=jobcomp/none
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=2 RealMemory=$MEM State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
CONF
cat > "$CONF_DIR/slurmdbd.conf" <<CONF
# written by faultstream deploy/slurm/setup.sh
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=6819
SlurmUser=root
LogFile=$LOG_DIR/slurmdbd.log
PidFile=/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageLoc=slurm_acct_db
StorageUser=slurm
StoragePass=fs-test-only
CONF
chmod 600 "$CONF_DIR/slurmdbd.conf"
cat > "$CONF_DIR/cgroup.conf" <<CONF
CgroupPlugin=autodetect
CONF

# ---- munge ----------------------------------------------------------------------------------
if [[ ! -s /etc/munge/munge.key ]]; then
    say "creating munge key"
    mkdir -p /etc/munge
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
fi
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
chmod 400 /etc/munge/munge.key
if ! munge -n >/dev/null 2>&1; then
    say "starting munged"
    runuser -u munge -- /usr/sbin/munged
    for _ in $(seq 50); do munge -n >/dev/null 2>&1 && break; sleep 0.2; done
fi
munge -n | unmunge >/dev/null

# ---- MariaDB --------------------------------------------------------------------------------
if ! mariadb -uroot -e 'select 1' >/dev/null 2>&1; then
    say "starting MariaDB"
    mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
    [[ -d /var/lib/mysql/mysql ]] || mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null
    (setsid mariadbd --user=mysql --bind-address=127.0.0.1 --skip-networking=0 \
        >"$LOG_DIR/mariadb.log" 2>&1 &)
    for _ in $(seq 150); do mariadb -uroot -e 'select 1' >/dev/null 2>&1 && break; sleep 0.2; done
fi
mariadb -uroot -e "create database if not exists slurm_acct_db;
  create user if not exists 'slurm'@'localhost' identified by 'fs-test-only';
  grant all on slurm_acct_db.* to 'slurm'@'localhost'"

# ---- slurmdbd, slurmctld, slurmd ------------------------------------------------------------
running() { [[ -s "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }
if ! running /run/slurmdbd.pid; then
    say "starting slurmdbd"
    slurmdbd
    for _ in $(seq 150); do (exec 3<>/dev/tcp/127.0.0.1/6819) 2>/dev/null && break; sleep 0.2; done
fi
if ! running /run/slurmctld.pid; then
    say "starting slurmctld"
    slurmctld
fi
for _ in $(seq 150); do scontrol ping >/dev/null 2>&1 && break; sleep 0.2; done
if ! running /run/slurmd.pid; then
    say "starting slurmd"
    slurmd -N "$NODE"
fi

# ---- wait for the node ----------------------------------------------------------------------
deadline=$((SECONDS + WAIT_S))
state=""
while ((SECONDS < deadline)); do
    state=$(sinfo -h -n "$NODE" -o %T 2>/dev/null || true)
    case "$state" in
        idle|mixed|allocated) break ;;
        down*|drain*) scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true ;;
    esac
    sleep 1
done
case "$state" in
    idle|mixed|allocated) ;;
    *) echo "slurm-setup: node $NODE not idle after ${WAIT_S}s (state: '${state}')" >&2
       tail -n 20 "$LOG_DIR"/slurmctld.log "$LOG_DIR"/slurmd.log "$LOG_DIR"/slurmdbd.log >&2 || true
       exit 1 ;;
esac
# the cluster registers itself with slurmdbd when slurmctld starts; make sure it is there
for _ in $(seq 50); do
    sacctmgr -n -P list cluster format=cluster 2>/dev/null | grep -qx "$CLUSTER" && break
    sleep 0.2
done
say "Slurm ready: cluster $CLUSTER, node $NODE $state"
