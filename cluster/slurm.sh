#!/usr/bin/env bash
# A single-node SLURM cluster with accounting, from nothing, without systemd.
#
#   cluster/slurm.sh up   <statedir>   munge, MariaDB, slurmdbd, slurmctld, slurmd; waits until the
#                                      node is idle and sacct answers; prints the bring-up time
#   cluster/slurm.sh down <statedir>   cancels jobs, kills any job process left, stops every
#                                      daemon by the PID in its pid file
#   cluster/slurm.sh status <statedir> which daemons of the statedir are alive
#
# Needs root and Debian's slurm-wlm, slurmdbd, munge and mariadb-server (22.05 / 10.11 tested).
# Everything lives under <statedir> (keys, database, spool, state, logs, pid files); the only
# files outside it are links that SLURM insists on:
#   /etc/slurm/slurm.conf      -> <statedir>/etc/slurm.conf   (the jobstep plugin drops SLURM_CONF)
#   /etc/slurm/slurmdbd.conf      a copy, mode 0600 (slurmdbd 22.05 has no -f and wants 0600)
#   /run/munge/munge.socket.2  -> <statedir>/munge/munge.socket.2 (sacctmgr and slurmdbd ignore
#                                 AuthInfo=socket=)
# So one such cluster runs on a machine at a time; `up` refuses to start a second one. `up` on a
# cluster that is up does nothing; a failed `up` says which daemon failed and stops what it started.
#
# Environment: SLURM_CLUSTER_ACCOUNT (default "martingale"): the account created for root;
#              SLURM_UP_TIMEOUT (default 60): seconds to wait for each daemon.
set -Eeuo pipefail
# Fail loudly: any unexpected failure names its line and command.
on_err() { trap 'echo "slurm.sh: error: line $LINENO: \`$BASH_COMMAND\` failed (logs: ${STATE:-?}/log)" >&2' ERR; }
on_err

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ACCOUNT="${SLURM_CLUSTER_ACCOUNT:-martingale}"
TIMEOUT="${SLURM_UP_TIMEOUT:-60}"
# Daemons in start order; `down` stops them in reverse.
DAEMONS=(munged mariadbd slurmdbd slurmctld slurmd)

die() { echo "slurm.sh: error: $*" >&2; exit 1; }
log() { echo "slurm.sh: $*" >&2; }

usage() { echo "usage: $0 up|down|status <statedir>" >&2; exit 2; }

# The PID of a daemon of this statedir if it is alive, else nothing.
alive_pid() {
    local f="$STATE/run/$1.pid" pid
    [[ -s "$f" ]] || return 1
    pid="$(tr -dc 0-9 <"$f")"
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

# Processes of this cluster's jobs: SLURM_CONF ours and a SLURM_JOB_ID in their environment.
job_pids() {
    local f pid
    for f in $(grep -lzx "SLURM_CONF=$STATE/etc/slurm.conf" /proc/[0-9]*/environ 2>/dev/null || true); do
        pid="${f#/proc/}"; pid="${pid%/environ}"
        grep -qz "^SLURM_JOB_ID=" "$f" 2>/dev/null && echo "$pid"
    done
    return 0
}

# Wait until "$@" succeeds (quietly), or die naming what did not come up and its log.
wait_for() {
    local what="$1" logfile="$2"; shift 2
    local deadline=$((SECONDS + TIMEOUT))
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS >= deadline)); then
            [[ -f "$logfile" ]] && tail -n 20 "$logfile" >&2
            die "$what did not come up within ${TIMEOUT}s (log: $logfile)"
        fi
        sleep 0.2
    done
}

# A TCP port nobody listens on at 127.0.0.1, counting up from $1 (bash's /dev/tcp: no ss needed).
free_port() {
    local p="$1"
    while (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; do p=$((p + 1)); done
    echo "$p"
}

# Fill @NAME@ placeholders of a template from shell variables of the same name.
render() {
    local src="$1" dst="$2" sedargs=() v
    for v in STATE CTLD_PORT SLURMD_PORT DBD_PORT DB_PORT DB_PASS CPUS BOARDS SOCKETS CORES THREADS MEM_MB; do
        sedargs+=(-e "s|@$v@|${!v}|g")
    done
    sed "${sedargs[@]}" "$src" >"$dst"
}

check_packages() {
    local missing=() b
    for b in munged mungekey mariadbd mariadb-install-db mariadb mariadb-admin slurmdbd slurmctld slurmd sacctmgr sinfo sacct; do
        command -v "$b" >/dev/null 2>&1 || [[ -x "/usr/sbin/$b" ]] || missing+=("$b")
    done
    ((${#missing[@]} == 0)) || die "missing programs: ${missing[*]} (apt-get install slurm-wlm slurmdbd munge mariadb-server)"
    [[ "$(id -u)" == 0 ]] || die "must run as root (the daemons and /etc/slurm links need it)"
}

cmd_up() {
    check_packages
    local t0 rc
    t0="$(date +%s.%N)"
    export PATH="$PATH:/usr/sbin"

    # Idempotent-ish: all alive -> nothing to do; some alive -> refuse (run down first).
    local up=() d
    for d in "${DAEMONS[@]}"; do alive_pid "$d" >/dev/null && up+=("$d"); done
    if ((${#up[@]} == ${#DAEMONS[@]})); then log "already up in $STATE"; return 0; fi
    ((${#up[@]} == 0)) || die "partly up in $STATE (${up[*]} running): run '$0 down $STATE' first"
    # Another cluster's config linked in /etc/slurm with a live controller: one cluster at a time.
    if [[ -L /etc/slurm/slurm.conf ]]; then
        local other
        other="$(dirname "$(dirname "$(readlink /etc/slurm/slurm.conf)")")"
        if [[ "$other" != "$STATE" && -s "$other/run/slurmctld.pid" ]] \
            && kill -0 "$(cat "$other/run/slurmctld.pid")" 2>/dev/null; then
            die "another cluster is up (state in $other): run '$0 down $other' first"
        fi
    fi

    # Start everything in a subshell (errexit stays on there); if anything fails, stop what did
    # start, so that a failed `up` leaves no daemon behind.
    set +e; trap - ERR
    (on_err; set -e; start_all "$t0")
    rc=$?
    set -e; on_err
    if ((rc != 0)); then
        log "bring-up failed (exit $rc): stopping what was started"
        cmd_down || true
        exit "$rc"
    fi
}

start_all() {
    local t0="$1"
    mkdir -p "$STATE"/{etc,run,log,munge,mysql,slurmctld,slurmd}
    chmod 0755 "$STATE" "$STATE/munge"   # munged wants its socket folder 0755

    # ---- munge: our own key and socket; the standard socket path linked to it.
    [[ -s "$STATE/munge/munge.key" ]] || mungekey --create --keyfile="$STATE/munge/munge.key" --bits=1024
    chmod 0600 "$STATE/munge/munge.key"
    # --force: the key and socket are not under /etc/munge and /run/munge, owned by root, not munge
    munged --force --socket="$STATE/munge/munge.socket.2" --key-file="$STATE/munge/munge.key" \
        --pid-file="$STATE/run/munged.pid" --log-file="$STATE/log/munged.log" \
        --seed-file="$STATE/munge/munged.seed" </dev/null >>"$STATE/log/munged.out" 2>&1
    mkdir -p /run/munge && chmod 0755 /run/munge
    ln -sfn "$STATE/munge/munge.socket.2" /run/munge/munge.socket.2
    wait_for munged "$STATE/log/munged.log" \
        bash -c "munge -n -S '$STATE/munge/munge.socket.2' | unmunge -S '$STATE/munge/munge.socket.2'"

    # ---- MariaDB: own datadir, TCP on 127.0.0.1, a 'slurm'@'127.0.0.1' user.
    DB_PORT="$(free_port 13306)"
    DB_PASS="$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
    local sock="$STATE/mysql/mysqld.sock"
    if [[ ! -d "$STATE/mysql/data/mysql" ]]; then
        mariadb-install-db --no-defaults --user=root --datadir="$STATE/mysql/data" \
            --auth-root-authentication-method=socket --skip-test-db >"$STATE/log/mariadb-install.log" 2>&1 \
            || { tail -n 20 "$STATE/log/mariadb-install.log" >&2; die "mariadb-install-db failed"; }
    fi
    # In the background, in its own session (setsid: no terminal signals), so it outlives this
    # script. Its pid is recorded at once (not by mariadbd later), so a failed `up` can stop it.
    setsid mariadbd --no-defaults --user=root --datadir="$STATE/mysql/data" --socket="$sock" \
        --port="$DB_PORT" --bind-address=127.0.0.1 --pid-file="$STATE/mysql/mariadbd.pid" \
        --log-error="$STATE/log/mariadb.log" --skip-name-resolve \
        --innodb-buffer-pool-size=32M --performance-schema=OFF </dev/null >/dev/null 2>&1 &
    echo $! >"$STATE/run/mariadbd.pid"
    wait_for MariaDB "$STATE/log/mariadb.log" mariadb-admin --no-defaults -S "$sock" -u root ping
    mariadb --no-defaults -S "$sock" -u root -e "
        CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
        ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
        FLUSH PRIVILEGES;"

    # ---- slurm.conf / slurmdbd.conf from the templates.
    CTLD_PORT="$(free_port 16817)"
    SLURMD_PORT="$(free_port $((CTLD_PORT + 1)))"
    DBD_PORT="$(free_port $((SLURMD_PORT + 1)))"
    # The machine's own topology, as slurmd sees it (a node declared bigger than it is is drained).
    local hw
    hw="$(slurmd -C | head -n 1)"
    field() { sed -n "s/.*\b$1=\([0-9]*\).*/\1/p" <<<"$hw"; }
    CPUS="$(field CPUs)"; BOARDS="$(field Boards)"; SOCKETS="$(field SocketsPerBoard)"
    CORES="$(field CoresPerSocket)"; THREADS="$(field ThreadsPerCore)"
    # RealMemory: 90% of what is available now (slurmd drains a node that has less than declared).
    MEM_MB="$(awk '/^MemAvailable:/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)"
    if ((CORES * SOCKETS * BOARDS < 2)); then
        log "warning: this machine has fewer than 2 cores; two 1-CPU jobs will not run at once"
    fi
    render "$HERE/slurm.conf.in" "$STATE/etc/slurm.conf"
    render "$HERE/slurmdbd.conf.in" "$STATE/etc/slurmdbd.conf"
    # slurmdbd reads slurmdbd.conf next to $SLURM_CONF if that is set, else /etc/slurm/: both 0600.
    chmod 0600 "$STATE/etc/slurmdbd.conf"
    mkdir -p /etc/slurm
    ln -sfn "$STATE/etc/slurm.conf" /etc/slurm/slurm.conf
    install -m 0600 -o root -g root "$STATE/etc/slurmdbd.conf" /etc/slurm/slurmdbd.conf
    export SLURM_CONF="$STATE/etc/slurm.conf"

    # ---- slurmdbd (daemonizes itself, writes PidFile); then the cluster and the account.
    slurmdbd </dev/null >>"$STATE/log/slurmdbd.out" 2>&1
    wait_for slurmdbd "$STATE/log/slurmdbd.log" sacctmgr -n list cluster
    sacctmgr -i add cluster martingale >/dev/null 2>&1 || true
    sacctmgr -n -P list cluster format=cluster | grep -qx martingale || die "sacctmgr could not add the cluster"
    sacctmgr -i add account "$ACCOUNT" cluster=martingale description=test organization=test >/dev/null 2>&1 || true
    sacctmgr -i add user root account="$ACCOUNT" cluster=martingale >/dev/null 2>&1 || true

    # ---- slurmctld and slurmd (both daemonize and write their pid files).
    slurmctld -f "$SLURM_CONF" </dev/null >>"$STATE/log/slurmctld.out" 2>&1
    wait_for slurmctld "$STATE/log/slurmctld.log" scontrol ping
    slurmd -f "$SLURM_CONF" -N localhost </dev/null >>"$STATE/log/slurmd.out" 2>&1
    wait_for "slurmd (node idle)" "$STATE/log/slurmd.log" \
        bash -c "sinfo -h -N -n localhost -o %t | grep -qx idle"
    wait_for "sacct" "$STATE/log/slurmdbd.log" sacct -n -X -S now-1hour
    for d in "${DAEMONS[@]}"; do alive_pid "$d" >/dev/null || die "$d has no live pid in $STATE/run"; done

    local secs
    secs="$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')"
    log "cluster up in ${secs}s: state $STATE, node localhost (CPUs=$CPUS, RealMemory=${MEM_MB}MB), partition debug, account $ACCOUNT"
    echo "up_seconds=$secs"
}

# Stop one daemon by its pid file: TERM, wait, KILL.
stop_daemon() {
    local d="$1" pid i
    pid="$(alive_pid "$d")" || { rm -f "$STATE/run/$d.pid"; return 0; }
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
        log "$d ($pid) ignored SIGTERM for 10s: SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        sleep 0.2
    fi
    kill -0 "$pid" 2>/dev/null && die "$d ($pid) is still running"
    rm -f "$STATE/run/$d.pid"
}

cmd_down() {
    [[ -d "$STATE" ]] || { log "nothing to stop: $STATE does not exist"; return 0; }
    export PATH="$PATH:/usr/sbin"
    export SLURM_CONF="$STATE/etc/slurm.conf"
    # Jobs first, so that no slurmstepd or job process outlives the cluster.
    if alive_pid slurmctld >/dev/null && alive_pid slurmd >/dev/null; then
        scancel --full --quiet -u root 2>/dev/null || true
        local i
        for ((i = 0; i < 150; i++)); do
            [[ -z "$(squeue -h -t PD,R,CG,S -o %i 2>/dev/null)" ]] && break
            sleep 0.2
        done
    fi
    # A job process can outlive its job: a cancelled step's Snakemake caught SIGTERM, hung in its
    # shutdown, and slept on with PPID 1 after slurmstepd had gone (seen twice in the test suite).
    local stray
    stray="$(job_pids | tr '\n' ' ')"
    if [[ -n "${stray// /}" ]]; then
        log "down: killing job processes that outlived their jobs: $stray"
        kill -KILL $stray 2>/dev/null || true
    fi
    local i
    for ((i = ${#DAEMONS[@]} - 1; i >= 0; i--)); do stop_daemon "${DAEMONS[i]}"; done
    # Remove our links (only if they are ours).
    [[ "$(readlink /etc/slurm/slurm.conf 2>/dev/null)" == "$STATE/etc/slurm.conf" ]] && rm -f /etc/slurm/slurm.conf
    [[ "$(readlink /run/munge/munge.socket.2 2>/dev/null)" == "$STATE/munge/munge.socket.2" ]] && rm -f /run/munge/munge.socket.2
    if [[ -f /etc/slurm/slurmdbd.conf ]] && grep -q "PidFile=$STATE/run/slurmdbd.pid" /etc/slurm/slurmdbd.conf; then
        rm -f /etc/slurm/slurmdbd.conf
    fi
    log "down: no daemon of $STATE is running"
}

cmd_status() {
    trap - ERR   # a daemon that is down is an answer here, not an error
    local d pid rc=0
    for d in "${DAEMONS[@]}"; do
        if pid="$(alive_pid "$d")"; then echo "$d $pid"; else echo "$d down"; rc=1; fi
    done
    return $rc
}

(($# == 2)) || usage
STATE="$(realpath -m "$2")"
case "$1" in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    *) usage ;;
esac
