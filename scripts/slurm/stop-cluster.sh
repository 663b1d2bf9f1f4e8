#!/usr/bin/env bash
# stop-cluster.sh - stop the local Slurm cluster started by start-cluster.sh.
#
#   stop-cluster.sh            cancel all jobs, stop slurmd(s), slurmctld, slurmdbd, MariaDB, munged
#   stop-cluster.sh --purge    same, and also wipe all state: slurmctld state (job ids restart at 1),
#                              slurmd spool, logs, the accounting database, generated configs,
#                              /etc/hosts entry, /dev/fakegpu* devices and the site's users
#                              (alice, bob: their homes too). Packages stay installed.
#   stop-cluster.sh --keep-services   stop slurm daemons only; leave MariaDB and munged running
#
# Every process is stopped by the PID in its pid file (nothing is killed by name).
set -uo pipefail
PURGE=0; KEEP_SERVICES=0
for a in "$@"; do
  case "$a" in
    --purge) PURGE=1 ;;
    --keep-services) KEEP_SERVICES=1 ;;
    *) echo "usage: $0 [--purge] [--keep-services]" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "must run as root" >&2; exit 1; }
# same lock as start-cluster.sh: never stop half-way through someone else's start
exec 9>/run/hpceval-slurm-cluster.lock
flock -w 600 9 || { echo "stop-cluster: lock busy" >&2; exit 1; }
log() { echo "[stop-cluster] $*"; }

# shellcheck source=scripts/slurm/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
kill_pidfile() {  # kill_pidfile PIDFILE NAME
  local f=$1 name=$2 p
  if ! pid_alive "$f"; then rm -f "$f"; return 0; fi
  p=$(cat "$f"); log "stopping $name (pid $p)"
  kill "$p" 2>/dev/null
  for _ in $(seq 100); do
    if pid_gone "$p"; then rm -f "$f"; return 0; fi
    sleep 0.2
  done
  log "$name (pid $p) ignored SIGTERM for 20 s: SIGKILL"; kill -9 "$p" 2>/dev/null; rm -f "$f"
}

# 1. cancel every job so no slurmstepd / job process outlives its slurmd
if pid_alive /run/slurm/slurmctld.pid; then
  jobs=$(squeue -h -o %F 2>/dev/null | sort -u | paste -sd' ' -)
  if [ -n "$jobs" ]; then
    log "cancelling jobs: $jobs"
    # shellcheck disable=SC2086
    scancel $jobs 2>/dev/null
    for _ in $(seq 100); do
      squeue -h -t all -o %T 2>/dev/null \
        | grep -qvE '^(COMPLETED|CANCELLED|FAILED|TIMEOUT|NODE_FAIL|PREEMPTED|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE)$' || break
      sleep 0.2
    done
  fi
fi

# 2. slurm daemons
for f in /run/slurm/slurmd-*.pid; do
  [ -e "$f" ] || continue
  n=$(basename "$f" .pid); kill_pidfile "$f" "$n"
done
kill_pidfile /run/slurm/slurmctld.pid slurmctld
rm -f /run/slurm/conf.sha   # start-cluster.sh: "config the running daemons were started with"

if [ "$PURGE" = 1 ] && pid_alive /run/slurm/slurmdbd.pid && mariadb-admin ping >/dev/null 2>&1; then
  kill_pidfile /run/slurm/slurmdbd.pid slurmdbd
  log "dropping accounting database slurm_acct_db"
  mariadb -e 'DROP DATABASE IF EXISTS slurm_acct_db;'
fi
kill_pidfile /run/slurm/slurmdbd.pid slurmdbd
rm -f /run/slurm/dbd.sha

kill_pidfile /run/slurm/site-proxy.pid site-proxy
# the site's network: every node namespace, veth pair and the bridge start-cluster.sh made (by
# their names: hpceval-<node>, hpcv-<node>, the bridge), whatever the node count it was started with
# shellcheck source=scripts/slurm/net.sh
. "$(dirname "${BASH_SOURCE[0]}")/net.sh"
made=()
for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^hpceval-node[0-9]*$'); do made+=("${ns#hpceval-}"); done
if [ ${#made[@]} -gt 0 ] || ip link show "$NET_BRIDGE" >/dev/null 2>&1; then
  log "removing the site's network: ${made[*]:-} $NET_BRIDGE"; net_down "${made[@]}"
fi

# 3. MariaDB and munge
if [ "$KEEP_SERVICES" = 0 ]; then
  if [ -x /etc/init.d/mariadb ] && [ -s /run/mysqld/mysqld.pid ]; then
    log "stopping mariadb"
    /etc/init.d/mariadb stop </dev/null >/dev/null 2>&1 || kill_pidfile /run/mysqld/mysqld.pid mariadbd
  fi
  # no init script (start-cluster.sh fallback ran mariadbd-safe by hand) or init stop left it running:
  # SIGTERM mariadbd by its pid file; mariadbd-safe exits by itself when mariadbd exits cleanly
  kill_pidfile /run/mysqld/mysqld.pid mariadbd
  kill_pidfile /run/munge/munged.pid munged
fi

# 4. state
if [ "$PURGE" = 1 ]; then
  log "purging state, logs, generated configs"
  rm -rf /var/lib/slurm/slurmctld/* /var/lib/slurm/slurmd/* /var/log/slurm/* /var/lib/hpceval-node-tmp  # node-tmp.sh
  rm -f /etc/slurm/slurm.conf /etc/slurm/gres.conf /etc/slurm/cgroup.conf /etc/slurm/slurmdbd.conf \
        /etc/mysql/mariadb.conf.d/60-slurm.cnf
  if grep -q '# slurm-local-cluster$' /etc/hosts; then
    grep -v '# slurm-local-cluster$' /etc/hosts > /etc/hosts.slurmtmp; cat /etc/hosts.slurmtmp > /etc/hosts; rm -f /etc/hosts.slurmtmp
  fi
  for d in /dev/fakegpu*; do [ -c "$d" ] && rm -f "$d"; done
  # the site's users start-cluster.sh made (SITE_USER_MARK in their GECOS field), their homes too
  for u in $(getent passwd | awk -F: -v mark="$SITE_USER_MARK" '$5 == mark {print $1}'); do
    log "removing user $u"; userdel --remove "$u" 2>/dev/null
  done
  getent group "$SITE_GROUP" >/dev/null && [ -z "$(getent group "$SITE_GROUP" | cut -d: -f4)" ] &&
    groupdel "$SITE_GROUP"
  # cgroup v1 dirs left by proctrack/cgroup (empty dirs only; rmdir fails if anything is inside)
  for d in /sys/fs/cgroup/*/slurm_node*; do [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null; done
fi
log "done"
exit 0
