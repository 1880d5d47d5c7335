#!/usr/bin/env bash
# local-slurm.sh: bring up, inspect and tear down a REAL two-node SLURM cluster on this
# one machine, so libtrain's SLURM launcher can be tested end to end (sbatch, srun,
# requeue, signals, time limits) without a site cluster.
#
#   scripts/local-slurm.sh start    # munged + slurmctld + slurmd node1/node2; waits until idle
#   scripts/local-slurm.sh status   # daemon pids and sinfo; exit 0 when up, 3 when down
#   scripts/local-slurm.sh stop     # stops only what this script started
#
# Nodes node1 (127.0.0.2, slurmd port 17001) and node2 (127.0.0.3, port 17002), 2 CPUs
# each, partition "debug" (default). All Slurm traffic uses 127.0.0.x addresses; slurmctld
# listens on 127.0.0.1 only (slurmd/srun listen on all addresses: Slurm can't narrow them here).
# Config, state, logs, pid files: $TRAIN_SLURM_DIR (default <repo>/.slurm/).
# Clients find the config through SLURM_CONF (source $DIR/env.sh), or through
# /etc/slurm/slurm.conf, which start makes a symlink to $DIR/slurm.conf when absent.
# Needs root (Slurm 22.05 from Debian's slurm-wlm, munge). See docs/local-slurm.md.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$SCRIPT_DIR/.." && pwd)"
DIR="$(realpath -m "${TRAIN_SLURM_DIR:-$REPO/.slurm}")"
CONF="$DIR/slurm.conf"
RUN="$DIR/run"
LOG="$DIR/log"

CLUSTER=libtrain
PARTITION=debug
NODES=(node1 node2)
declare -A NODE_ADDR=([node1]=127.0.0.2 [node2]=127.0.0.3)
declare -A NODE_PORT=([node1]=17001 [node2]=17002)
CTLD_PORT="${TRAIN_SLURM_CTLD_PORT:-16817}"
CRED_EXPIRE="${TRAIN_SLURM_CRED_EXPIRE:-30}"   # s, >= 5; also how long a requeued job waits
START_TIMEOUT="${TRAIN_SLURM_START_TIMEOUT:-60}"
ETC_CONF=/etc/slurm/slurm.conf
MUNGE_KEY=/etc/munge/munge.key

log() { echo "local-slurm: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
die_start() { tail_logs; die "$*; '$0 stop' cleans up"; }

# Client commands must use our config, whatever the caller's environment says.
export SLURM_CONF="$CONF"

# ---------------------------------------------------------------- helpers

# running PID: the process exists and is not a zombie.
running() { [[ -r "/proc/$1/stat" ]] && ! awk '{ exit !($3 == "Z") }' "/proc/$1/stat" 2>/dev/null; }

# pid_alive PIDFILE NAME: true when PIDFILE names a live process whose command is NAME.
pid_alive() {
    local f="$1" name="$2" pid
    [[ -s "$f" ]] || return 1
    pid="$(tr -dc '0-9' <"$f")"
    [[ -n "$pid" ]] && running "$pid" || return 1
    # Guard against pid reuse: the process must be the daemon we started.
    local cmd
    cmd="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
    [[ "$cmd" == *"$name"* ]] || return 1
    echo "$pid"
}

munge_works() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

ctld_alive() { pid_alive "$RUN/slurmctld.pid" slurmctld >/dev/null; }
slurmd_alive() { pid_alive "$RUN/slurmd.$1.pid" "slurmd -D -f $CONF -N $1" >/dev/null; }

all_daemons_alive() {
    ctld_alive || return 1
    local n
    for n in "${NODES[@]}"; do slurmd_alive "$n" || return 1; done
}

nodes_idle() {
    local out n
    out="$(timeout 10 sinfo -h -N -p "$PARTITION" -o '%N %t' 2>/dev/null)" || return 1
    for n in "${NODES[@]}"; do
        grep -Eq "^$n (idle|mix|alloc)\$" <<<"$out" || return 1
    done
}

tail_logs() {
    local f out
    for f in "$LOG"/munged.log "$LOG"/slurmctld.log "$LOG"/slurmd.*.log; do
        [[ -e "$f" ]] || continue
        out="${f%.log}.out"     # stderr of the daemon: start-up errors before its log opens
        [[ -s "$f" ]] || f="$out"
        [[ -s "$f" ]] || continue
        echo "----- tail $f" >&2
        tail -n 12 "$f" >&2
    done
}

# ---------------------------------------------------------------- setup steps

ensure_root() { [[ "$(id -u)" == 0 ]] || die "must run as root (slurmd and munged need it)"; }

ensure_packages() {
    local missing=0 c
    for c in slurmctld slurmd sinfo sbatch srun scontrol munged munge unmunge; do
        command -v "$c" >/dev/null 2>&1 || missing=1
    done
    ((missing)) || return 0
    log "installing slurm-wlm and munge with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y slurm-wlm munge >/dev/null 2>&1 || {
        apt-get update
        apt-get install -y slurm-wlm munge
    }
}

ensure_hosts() {
    local n a cur
    for n in "${NODES[@]}"; do
        a="${NODE_ADDR[$n]}"
        if grep -Eq "^[[:space:]]*${a//./\\.}[[:space:]]+([^#]*[[:space:]])?$n([[:space:]]|\$)" /etc/hosts; then
            continue
        fi
        cur="$(getent hosts "$n" | awk '{print $1; exit}' || true)"
        if [[ -n "$cur" && "$cur" != "$a" ]]; then
            die "/etc/hosts (or DNS) maps $n to $cur, expected $a; fix it by hand"
        fi
        echo "$a $n" >>/etc/hosts
        log "added '$a $n' to /etc/hosts"
    done
}

ensure_munge() {
    if munge_works; then
        if pid_alive "$RUN/munged.pid" munged >/dev/null; then
            log "munged (started by this script) is running"
        else
            log "reusing the munged that is already running"
        fi
        return 0
    fi
    if [[ ! -s "$MUNGE_KEY" ]]; then
        log "creating $MUNGE_KEY"
        mkdir -p "$(dirname "$MUNGE_KEY")"
        if command -v mungekey >/dev/null 2>&1; then
            mungekey --create --keyfile="$MUNGE_KEY"
        else
            dd if=/dev/urandom of="$MUNGE_KEY" bs=1 count=1024 status=none
        fi
        chmod 0400 "$MUNGE_KEY"
        if id munge >/dev/null 2>&1; then chown munge:munge "$MUNGE_KEY"; fi
    fi
    # Default socket (/run/munge/munge.socket.2), so every client finds it.
    mkdir -p /run/munge "$RUN" "$LOG" "$DIR/state"
    chmod 0755 /run/munge
    local pid
    if pid="$(pid_alive "$RUN/munged.pid" munged)"; then
        log "our munged (pid $pid) does not answer; restarting it"
        kill "$pid" 2>/dev/null || true
        sleep 1
    fi
    rm -f /run/munge/munge.socket.2.lock 2>/dev/null || true
    munged --force \
        --pid-file="$RUN/munged.pid" \
        --log-file="$LOG/munged.log" \
        --seed-file="$DIR/state/munged.seed" \
        || { tail_logs; die "munged failed to start"; }
    touch "$RUN/munged.ours"
    local i
    for i in $(seq 1 50); do munge_works && break; sleep 0.1; done
    munge_works || { tail_logs; die "munged started but 'munge -n | unmunge' fails"; }
    log "started munged (pid $(cat "$RUN/munged.pid"))"
}

# slurmctld listens on 127.0.0.1 only (NoCtldInAddrAny: it binds to what this host's name
# resolves to, so only when that is loopback). slurmd and srun always listen on all
# addresses: NoInAddrAny would bind them to their hostname's address, but slurmd answers
# srun at the *source* address of srun's connection, which is 127.0.0.1 for any loopback
# destination, so an srun inside a job (bound to 127.0.0.2) gets "Connection refused".
# All traffic still goes over loopback: every address in the config is 127.0.0.x.
comm_params() {
    local a
    a="$(getent ahostsv4 "$(hostname)" 2>/dev/null | awk '{print $1; exit}' || true)"
    if [[ "$a" == 127.* ]]; then
        echo "CommunicationParameters=NoCtldInAddrAny"
    else
        echo "# $(hostname) resolves to '$a', not loopback: slurmctld listens on all addresses"
    fi
}

# Each slurmd runs in its own UTS namespace whose hostname is its node name, so jobs see
# `hostname` = node1/node2 (resolving to 127.0.0.2/3) as on a real cluster.
use_uts() { [[ "${TRAIN_SLURM_NO_UTS:-0}" != 1 ]] && unshare --uts true 2>/dev/null; }

# The first job id this start may hand out: past every id the completion log already holds, so ids
# never repeat on this machine even when slurmctld's saved state is gone (a user's view of
# jobcomp.txt, like sacct's, must name one job per id).
first_job_id() {
    local max=0 id
    # A running slurmctld keeps the value it started with.
    if ctld_alive && id="$(grep -o '^FirstJobId=[0-9]*' "$CONF" 2>/dev/null | cut -d= -f2)" && [[ -n "$id" ]]; then
        echo "$id"
        return
    fi
    if [[ -r "$DIR/jobcomp.txt" ]]; then
        id="$(grep -o '^JobId=[0-9]*' "$DIR/jobcomp.txt" | cut -d= -f2 | sort -n | tail -n 1)"
        [[ -n "$id" ]] && max="$id"
    fi
    echo $((max + 1))
}

write_conf() {
    local n tmp="$CONF.tmp.$$"
    mkdir -p "$DIR" "$RUN" "$LOG" "$DIR/state" "$DIR/spool"
    {
        cat <<EOF
# Generated by scripts/local-slurm.sh; edits are overwritten on the next start.
ClusterName=$CLUSTER
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=cred_expire=$CRED_EXPIRE
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=1,batch_sched_delay=0
ReturnToService=2
SlurmdParameters=config_overrides
$(comm_params)
JobRequeue=1
KillWait=30
MinJobAge=600
InactiveLimit=0
Waittime=0
MailProg=/bin/true
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/jobcomp.txt
FirstJobId=$(first_job_id)
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.%n.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$DIR/plugstack.conf
EOF
        for n in "${NODES[@]}"; do
            echo "NodeName=$n NodeAddr=${NODE_ADDR[$n]} NodeHostname=$n Port=${NODE_PORT[$n]} CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=2000 State=UNKNOWN"
        done
        echo "PartitionName=$PARTITION Nodes=node[1-2] Default=YES MaxTime=INFINITE State=UP"
    } >"$tmp"
    if [[ -f "$CONF" ]] && cmp -s "$tmp" "$CONF"; then
        rm -f "$tmp"
    else
        if [[ -f "$CONF" ]] && ctld_alive; then
            log "WARNING: slurm.conf changed while slurmctld runs; run '$0 stop' then '$0 start'"
        fi
        mv "$tmp" "$CONF"
    fi
    # No SPANK plugins: keep site plugstack.conf (next to /etc/slurm) out of this cluster.
    [[ -f "$DIR/plugstack.conf" ]] || echo "# no SPANK plugins in the local cluster" >"$DIR/plugstack.conf"
    echo "export SLURM_CONF=$CONF" >"$DIR/env.sh"
}

ensure_etc_conf() {
    mkdir -p "$(dirname "$ETC_CONF")"
    if [[ -L "$ETC_CONF" && ! -e "$ETC_CONF" ]]; then
        rm -f "$ETC_CONF"          # dangling link (e.g. an older, deleted .slurm folder)
    fi
    if [[ ! -e "$ETC_CONF" ]]; then
        ln -s "$CONF" "$ETC_CONF"
        log "linked $ETC_CONF -> $CONF"
    elif [[ "$(readlink -f "$ETC_CONF")" != "$(readlink -f "$CONF")" ]]; then
        log "note: $ETC_CONF belongs to something else; clients need SLURM_CONF=$CONF"
    fi
}

# spawn NAME PIDFILE CMD...: run a daemon in the foreground mode, detached, and record its pid.
spawn() {
    local name="$1" pidfile="$2"; shift 2
    setsid "$@" </dev/null >>"$LOG/$name.out" 2>&1 &
    echo $! >"$pidfile"
    disown $! 2>/dev/null || true
}

# port_busy ADDR PORT: something accepts connections there.
port_busy() { timeout 2 bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null; }

start_daemons() {
    local n pid
    if pid="$(pid_alive "$RUN/slurmctld.pid" slurmctld)"; then
        log "slurmctld already running (pid $pid)"
    else
        # Another cluster (another TRAIN_SLURM_DIR?) would answer our clients instead.
        port_busy 127.0.0.1 "$CTLD_PORT" &&
            die "port $CTLD_PORT is taken (another local SLURM?); stop it or set TRAIN_SLURM_CTLD_PORT"
        spawn slurmctld "$RUN/slurmctld.pid" slurmctld -D -f "$CONF"
        log "started slurmctld (pid $(cat "$RUN/slurmctld.pid"))"
    fi
    for n in "${NODES[@]}"; do
        mkdir -p "$DIR/spool/$n"
        if pid="$(pid_alive "$RUN/slurmd.$n.pid" "slurmd -D -f $CONF -N $n")"; then
            log "slurmd $n already running (pid $pid)"
        else
            port_busy "${NODE_ADDR[$n]}" "${NODE_PORT[$n]}" &&
                die "port ${NODE_PORT[$n]} of $n is taken (another local SLURM?); stop it first"
            if use_uts; then
                # own hostname (see use_uts); unshare and sh exec, so the pid stays slurmd's
                # shellcheck disable=SC2016  # $0/$@ expand in the inner sh
                spawn "slurmd.$n" "$RUN/slurmd.$n.pid" unshare --uts \
                    sh -c 'hostname "$0" && exec "$@"' "$n" slurmd -D -f "$CONF" -N "$n"
            else
                spawn "slurmd.$n" "$RUN/slurmd.$n.pid" slurmd -D -f "$CONF" -N "$n"
            fi
            log "started slurmd $n (pid $(cat "$RUN/slurmd.$n.pid"))"
        fi
    done
}

wait_up() {
    local t0="$1" deadline=$((SECONDS + START_TIMEOUT)) n
    while ((SECONDS < deadline)); do
        ctld_alive || die_start "slurmctld exited during start-up"
        for n in "${NODES[@]}"; do
            slurmd_alive "$n" || die_start "slurmd $n exited during start-up"
        done
        nodes_idle && return 0
        # A node left DOWN by an earlier run returns by itself (ReturnToService=2) once
        # its slurmd registers; a DRAINED one needs this.
        if grep -Eq ' (drain|drng|drained)$' <<<"$(timeout 10 sinfo -h -N -o '%N %t' 2>/dev/null || true)"; then
            scontrol update NodeName=node[1-2] State=RESUME >/dev/null 2>&1 || true
        fi
        sleep 0.5
    done
    timeout 10 sinfo -N >&2 || true
    tail_logs
    die "nodes not idle after ${START_TIMEOUT} s (start began $(elapsed "$t0") s ago); logs in $LOG"
}

elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

summary() {
    echo "local SLURM up: cluster $CLUSTER, partition $PARTITION, nodes node1(127.0.0.2) node2(127.0.0.3), 2 CPUs each; conf $CONF$1"
    echo "export SLURM_CONF=$CONF"
}

# ---------------------------------------------------------------- commands

cmd_start() {
    ensure_root
    local t0=$EPOCHREALTIME
    if [[ -f "$CONF" ]] && all_daemons_alive && munge_works && nodes_idle; then
        summary " (already running)"
        return 0
    fi
    ensure_packages
    ensure_hosts
    write_conf
    ensure_etc_conf
    ensure_munge
    start_daemons
    wait_up "$t0"
    summary "; up in $(elapsed "$t0") s"
}

# stop_pid NAME PIDFILE: TERM the process, wait for it (KILL after 30 s), remove the pid file.
stop_pid() {
    local name="$1" f="$2" pid i
    if ! pid="$(pid_alive "$f" "$name")"; then
        rm -f "$f"
        return 0
    fi
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 300); do
        running "$pid" || break
        sleep 0.1
    done
    if running "$pid"; then
        log "$name (pid $pid) ignored SIGTERM for 30 s; killing it"
        kill -KILL "$pid" 2>/dev/null || true
        for i in $(seq 1 100); do running "$pid" || break; sleep 0.1; done
    fi
    log "stopped ${name%% -D*} (pid $pid)"
    rm -f "$f"
}

# Step daemons of this cluster's jobs: slurmstepd processes holding a file under $DIR open.
our_stepds() {
    local p fd
    for p in $(pgrep -x slurmstepd 2>/dev/null || true); do
        for fd in "/proc/$p/fd/"*; do
            if [[ "$(readlink "$fd" 2>/dev/null)" == "$DIR/"* ]]; then
                echo "$p"
                break
            fi
        done
    done
}

cmd_stop() {
    ensure_root
    local n p i
    if ctld_alive && timeout 10 squeue -h -o %i >/dev/null 2>&1; then
        # End running jobs first, so no task outlives its slurmd.
        if [[ -n "$(timeout 10 squeue -h -t R,CG,S,CF -o %i 2>/dev/null)" ]]; then
            log "cancelling running jobs"
            timeout 10 squeue -h -t R,S,CF -o %i | xargs -r timeout 10 scancel >/dev/null 2>&1 || true
            for i in $(seq 1 80); do
                [[ -z "$(timeout 10 squeue -h -t R,CG,S,CF -o %i 2>/dev/null)" ]] && break
                sleep 0.5
            done
        fi
    fi
    for ((i = ${#NODES[@]} - 1; i >= 0; i--)); do
        n="${NODES[$i]}"
        stop_pid "slurmd -D -f $CONF -N $n" "$RUN/slurmd.$n.pid"
    done
    for p in $(our_stepds); do
        log "killing leftover slurmstepd $p"
        kill -KILL "$p" 2>/dev/null || true
    done
    stop_pid slurmctld "$RUN/slurmctld.pid"
    if [[ -f "$RUN/munged.ours" ]]; then
        stop_pid munged "$RUN/munged.pid"
        rm -f "$RUN/munged.ours"
    elif munge_works; then
        log "munged was not started by this script; leaving it running"
    fi
    if [[ -L "$ETC_CONF" && "$(readlink "$ETC_CONF")" == "$CONF" ]]; then
        rm -f "$ETC_CONF"
        log "removed the $ETC_CONF link"
    fi
    log "local SLURM stopped"
}

cmd_status() {
    local up=1 n pid
    if pid="$(pid_alive "$RUN/munged.pid" munged)"; then
        echo "munged     pid $pid (started by this script)$(munge_works || echo ', NOT answering')"
    elif munge_works; then
        echo "munged     running (not started by this script)"
    else
        echo "munged     down"; up=0
    fi
    if pid="$(pid_alive "$RUN/slurmctld.pid" slurmctld)"; then
        echo "slurmctld  pid $pid"
    else
        echo "slurmctld  down"; up=0
    fi
    for n in "${NODES[@]}"; do
        if pid="$(pid_alive "$RUN/slurmd.$n.pid" "slurmd -D -f $CONF -N $n")"; then
            echo "slurmd $n pid $pid"
        else
            echo "slurmd $n down"; up=0
        fi
    done
    echo "SLURM_CONF=$CONF"
    if ((up)) && ctld_alive; then
        timeout 10 sinfo || up=0
    fi
    ((up)) && return 0
    return 3
}

case "${1:-}" in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
*)
    echo "usage: $0 start|stop|status" >&2
    exit 2
    ;;
esac
