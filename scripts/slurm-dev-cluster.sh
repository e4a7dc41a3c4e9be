#!/usr/bin/env bash
# A multi-node SLURM cluster on this one host, for development and tests: munge, slurmctld and N
# slurmd daemons (SLURM_DEV_NODES, default 2, at most 4) run as root with all their config, state,
# sockets and logs under DIR. Each node is its own NodeName (dev1..devN) with its own Port=, the
# host's NodeHostname and NodeAddr=127.0.0.1, per-node spool/pid/log files (%n) and is started as
# `slurmd -N NAME`. No cgroups; four fake GPUs per node (GRES type "fake") made from character
# devices. Partitions over every node: ondemand (default), spot (preemptible: PreemptMode=REQUEUE,
# GraceTime=SLURM_DEV_GRACE_S, default 20 s, during which the job has its SIGTERM notice) and urgent
# (PriorityTier=10: a job there preempts spot jobs; PreemptType=preempt/partition_prio). Accounting (so `sacct` works): slurmdbd with a MariaDB of its
# own under DIR, when slurmdbd and mariadb-server are installed (SLURM_DEV_ACCOUNTING=0 turns it off).
#
#   scripts/slurm-dev-cluster.sh start DIR    install slurm-wlm, munge, slurmdbd, mariadb-server if
#                                             missing, write config, start,
#                                             wait until the node is idle; prints the `export` lines
#                                             (SLURM_CONF, GPUCTL_SLURM_CONFIG) to use it
#   scripts/slurm-dev-cluster.sh status DIR   daemons' PIDs and `sinfo`
#   scripts/slurm-dev-cluster.sh stop DIR     stop the daemons (TERM, then KILL after 5 s)
#
# Environment: SLURM_DEV_PORT (slurmctld port, default 16817; slurmdbd and MariaDB use +2 and +3,
# node K's slurmd +10+K), SLURM_DEV_NODES (2), SLURM_DEV_GRACE_S (20).
# Clients need SLURM_CONF=DIR/etc/slurm.conf.
set -euo pipefail

usage() { echo "usage: $0 start|stop|status DIR" >&2; exit 2; }
[[ $# -eq 2 ]] || usage
action=$1
dir=$(mkdir -p "$2" && cd "$2" && pwd)
port=${SLURM_DEV_PORT:-16817}
nodes=${SLURM_DEV_NODES:-2}
[[ $nodes =~ ^[1-4]$ ]] || { echo "SLURM_DEV_NODES must be 1 to 4 (got $nodes)" >&2; exit 2; }
grace=${SLURM_DEV_GRACE_S:-20}
conf=$dir/etc/slurm.conf
export SLURM_CONF=$conf

log() { echo "slurm-dev-cluster: $*" >&2; }

accounting() {
    [[ ${SLURM_DEV_ACCOUNTING:-1} != 0 ]] && command -v slurmdbd >/dev/null && command -v mariadbd >/dev/null
}

install_packages() {
    local need=()
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
        || need+=(slurm-wlm)
    command -v munged >/dev/null || need+=(munge)
    if [[ ${SLURM_DEV_ACCOUNTING:-1} != 0 ]]; then
        command -v slurmdbd >/dev/null || need+=(slurmdbd)
        command -v mariadbd >/dev/null || need+=(mariadb-server)
    fi
    [[ ${#need[@]} -eq 0 ]] && return
    log "installing ${need[*]} (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq -o DPkg::Lock::Timeout=300 "${need[@]}" >/dev/null
}

node_names() { seq -f "dev%g" 1 "$nodes"; }

write_config() {
    local host cpus mem name k last
    host=$(hostname -s)
    # Advertise at least 8 CPUs per node (config_overrides lets slurmd accept more than the machine
    # has): tests run a few small jobs side by side on 2-core machines.
    cpus=$(nproc); (( cpus < 8 )) && cpus=8
    mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))
    (( mem < 4096 )) && mem=4096
    mkdir -p "$dir"/{etc,munge,state,spool,log,run,dev}
    # Any local user may submit (as on a real cluster): the munge socket is reachable through its
    # folder (not listable), the key in it is root's alone (0400).
    chmod 711 "$dir/munge"
    echo "AutoDetect=off" >"$dir/etc/gres.conf"
    for name in $(node_names); do
        for k in 0 1 2 3; do
            [[ -c $dir/dev/$name-gpu$k ]] || { rm -f "$dir/dev/$name-gpu$k"; mknod "$dir/dev/$name-gpu$k" c 1 3; }
        done
        echo "NodeName=$name Name=gpu Type=fake File=$dir/dev/$name-gpu[0-3]" >>"$dir/etc/gres.conf"
    done
    last=dev$nodes
    cat >"$conf" <<CONF
ClusterName=gpuctldev
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket,cred_expire=10
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
MpiDefault=none
JobRequeue=1
ReturnToService=1
SchedulerParameters=sched_interval=2,bf_interval=1
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
MinJobAge=3600
KillWait=10
SlurmdTimeout=30
InactiveLimit=0
$(accounting_lines)
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
CONF
    k=0
    for name in $(node_names); do
        k=$((k + 1))
        echo "NodeName=$name NodeHostname=$host NodeAddr=127.0.0.1 Port=$((port + 10 + k)) CPUs=$cpus RealMemory=$mem Gres=gpu:fake:4 State=UNKNOWN" >>"$conf"
    done
    cat >>"$conf" <<CONF
PartitionName=ondemand Nodes=dev[1-$nodes] Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=OFF
PartitionName=spot Nodes=dev[1-$nodes] Default=NO MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime=$grace
PartitionName=urgent Nodes=dev[1-$nodes] Default=NO MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF
CONF
    # gpuctl's cluster config for this cluster: every GPU name runs on the fake GPUs.
    cat >"$dir/etc/gpuctl-slurm.yaml" <<GPUCTL
gres_types: {V100: fake, T4: fake, L4: fake, A10G: fake, A100: fake, A100-80GB: fake, H100: fake}
partitions: {spot: spot, on-demand: ondemand}
prices_usd_per_gpu_hour: {fake: {spot: 0.9, ondemand: 3.0}}
GPUCTL
    [[ -f $dir/munge/munge.key ]] || {
        dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
        chmod 400 "$dir/munge/munge.key"
    }
}

accounting_lines() {
    if accounting; then
        echo "AccountingStorageType=accounting_storage/slurmdbd"
        echo "AccountingStorageHost=$(hostname -s)"
        echo "AccountingStoragePort=$((port + 2))"
        echo "AccountingStoragePass=$dir/munge/munge.socket"
        echo "AccountingStoreFlags=job_comment"
        echo "AccountingStorageTRES=gres/gpu,gres/gpu:fake"
    else
        echo "AccountingStorageType=accounting_storage/none"
    fi
}

# MariaDB (its own datadir and socket, TCP on 127.0.0.1) and slurmdbd, before slurmctld.
start_accounting() {
    local i
    mkdir -p "$dir/mysql"
    if [[ ! -d $dir/mysql/mysql ]]; then
        mariadb-install-db --datadir="$dir/mysql" --user=root --auth-root-authentication-method=normal \
            --skip-test-db >"$dir/log/mariadb-install.log" 2>&1
    fi
    pid_alive "$dir/run/mariadb.pid" || {
        mariadbd --datadir="$dir/mysql" --user=root --socket="$dir/run/mysql.sock" --port=$((port + 3)) \
            --bind-address=127.0.0.1 --pid-file="$dir/run/mariadb.pid" --log-error="$dir/log/mariadb.log" \
            --skip-log-bin --innodb-buffer-pool-size=32M </dev/null >/dev/null 2>&1 &
    }
    for i in $(seq 1 60); do
        mariadb --socket="$dir/run/mysql.sock" -u root -e "SELECT 1" >/dev/null 2>&1 && break
        sleep 0.5
    done
    mariadb --socket="$dir/run/mysql.sock" -u root -e "
        CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'gpuctl-dev';
        CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'gpuctl-dev';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"
    cat >"$dir/etc/slurmdbd.conf" <<DBD
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
DbdHost=$(hostname -s)
DbdPort=$((port + 2))
SlurmUser=root
PidFile=$dir/run/slurmdbd.pid
LogFile=$dir/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$((port + 3))
StorageUser=slurm
StoragePass=gpuctl-dev
StorageLoc=slurm_acct_db
DBD
    chmod 600 "$dir/etc/slurmdbd.conf"
    pid_alive "$dir/run/slurmdbd.pid" || slurmdbd  # reads slurmdbd.conf beside $SLURM_CONF
    for i in $(seq 1 60); do
        sacctmgr -n list cluster >/dev/null 2>&1 && break
        sleep 0.5
    done
    sacctmgr -i -Q add cluster gpuctldev >/dev/null 2>&1 || true
}

print_exports() {
    echo "export SLURM_CONF=$conf"
    echo "export GPUCTL_SLURM_CONFIG=$dir/etc/gpuctl-slurm.yaml"
}

pid_alive() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

start() {
    install_packages
    if pid_alive "$dir/run/slurmctld.pid"; then
        log "already running in $dir"
        print_exports
        return
    fi
    write_config
    pid_alive "$dir/run/munged.pid" || munged --force --socket="$dir/munge/munge.socket" \
        --key-file="$dir/munge/munge.key" --pid-file="$dir/run/munged.pid" \
        --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munge.seed"
    accounting && start_accounting
    slurmctld -f "$conf"
    local name idle i
    for name in $(node_names); do
        mkdir -p "$dir/spool/$name"
        pid_alive "$dir/run/slurmd-$name.pid" || slurmd -f "$conf" -N "$name"
    done
    for i in $(seq 1 60); do
        idle=$(sinfo -h -N -p ondemand -t idle -o %N 2>/dev/null | sort -u | wc -l || true)
        if (( idle == nodes )); then
            log "$nodes nodes idle (cluster in $dir)"
            print_exports
            return
        fi
        for name in $(sinfo -h -N -p ondemand -t down,drain -o %N 2>/dev/null | sort -u); do
            scontrol update NodeName="$name" State=RESUME >/dev/null 2>&1 || true
        done
        sleep 0.5
    done
    log "the nodes did not become idle in 30 s; see $dir/log/slurmctld.log and $dir/log/slurmd-*.log"
    exit 1
}

stop_pid() {
    local file=$1 pid i
    [[ -f $file ]] || return 0
    pid=$(cat "$file")
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null || true
        for i in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$file"
}

stop() {
    # Jobs first, so no step outlives the daemons.
    pid_alive "$dir/run/slurmctld.pid" && scancel --full --quiet --user=root 2>/dev/null || true
    local file
    for file in "$dir"/run/slurmd-*.pid "$dir/run/slurmd.pid"; do stop_pid "$file"; done
    stop_pid "$dir/run/slurmctld.pid"
    # Job steps whose slurmd is gone (slurmstepd outlives it): this cluster's carry its SLURM_CONF.
    local proc
    for proc in /proc/[0-9]*; do
        [[ $(cat "$proc/comm" 2>/dev/null) == slurmstepd ]] || continue
        tr '\0' '\n' <"$proc/environ" 2>/dev/null | grep -qx "SLURM_CONF=$conf" && kill -KILL "${proc#/proc/}" 2>/dev/null || true
    done
    stop_pid "$dir/run/slurmdbd.pid"
    stop_pid "$dir/run/mariadb.pid"
    stop_pid "$dir/run/munged.pid"
    log "stopped (cluster in $dir)"
}

status() {
    local name
    for name in munged mariadb slurmdbd slurmctld $(node_names | sed 's/^/slurmd-/'); do
        if pid_alive "$dir/run/$name.pid"; then
            echo "$name: running (pid $(cat "$dir/run/$name.pid"))"
        else
            echo "$name: stopped"
        fi
    done
    pid_alive "$dir/run/slurmctld.pid" && sinfo
    return 0
}

case $action in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) usage ;;
esac
