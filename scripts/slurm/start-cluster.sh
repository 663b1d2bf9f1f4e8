#!/usr/bin/env bash
# start-cluster.sh - bring up a REAL Slurm cluster on this single Debian machine (hpceval's dev/CI
# cluster; derived from the tested recipe in shared/reference/slurm-dev-cluster.md).
#   Debian 12 bookworm: Slurm 22.05.8, munge 0.5.15, MariaDB 10.11  (verified)
#   Debian 13 trixie:   Slurm 24.11.5, munge 0.5.16, MariaDB 11.8.9 (verified; same configs work unchanged)
#   The release is read from /etc/debian_version; other releases are attempted with a warning.
#
#   * munge + slurmctld + N x slurmd (one per fake node, distinct ports)
#   * each node its own network host (SLURM_NETNS=1): a network namespace with its own address on
#     a bridge, no default route (no internet, as compute nodes at most sites); the controller,
#     slurmdbd and the user's shell are "login" (the bridge's address, the machine's own namespace)
#   * slurmdbd + MariaDB so that `sacct` works
#   * fake GPUs via GRES (gpu:G per node, backed by dummy char devices /dev/fakegpuK)
#   * each slurmd in its own UTS namespace, so `hostname` inside a job == node name
#
# Idempotent: safe to run again; installs missing packages, (re)writes configs,
# restarts slurm daemons only if their config changed, starts what is not running.
# Must run as root. No systemd needed (PID 1 here is not systemd).
#
# Tunables (environment variables):
#   SLURM_NUM_NODES   (2)      fake compute nodes node1..nodeN, partition "debug" (default)
#   SLURM_DRILL_NODES (1)      extra nodes after those, partition "drill" (never the default):
#                              fault drills kill their slurmd without touching other jobs
#   SLURM_CPU_NODES   (1)      CPU-only nodes after those (no GPUs), partition "cpu": where a site's
#                              profile sends aggregation, export, pulls and watch ticks
#                              (execution.cpu_partition)
#   SLURM_NODE_CPUS   (4)      CPUs declared per node (may exceed real cores)
#   SLURM_NODE_MEM_MB (8000)   RealMemory declared per node (bookkeeping only)
#   SLURM_NODE_GPUS   (4)      fake GPUs per node; 0 = no GRES
#   SLURM_ACCOUNTING  (1)      1 = slurmdbd + MariaDB (sacct works), 0 = none
#   SLURM_CGROUP      (0)      1 = proctrack/cgroup + task/cgroup (cgroup v1 works here)
#   SLURM_UTS_NS      (1)      1 = run each slurmd in its own UTS namespace
#   SLURM_NETNS       (1)      1 = each slurmd in its own network namespace (see scripts/slurm/net.sh);
#                              0 = every node on 127.0.0.1 (the kind old dev cluster)
#   SLURM_NET_PREFIX  (198.18.0) the site's /24: login .1, nodeI .(10+I) (RFC 2544 benchmark range)
#   SLURM_LOOPBACK_NAME_NODES (node2) nodes whose own name resolves to 127.0.1.1 on themselves, as
#                              Debian's installer and cloud-init write /etc/hosts ("" = none)
#   SLURM_NODE_TMP    (1)      1 = each node its own /tmp (scripts/slurm/node-tmp.sh); shared storage
#                              is the checkout, /home, SLURM_SCRATCH (/srv/scratch) and the
#                              folders of SLURM_SHARED_TMP (pytest's under /tmp are shared)
#   SLURM_PORT_BASE   (6820)   slurmd on nodeI listens on SLURM_PORT_BASE+I
#   SLURM_DB_PASS     (slurmdbpass)
#   SLURM_EXTRA_USERS ("")     extra unix users to add to the accounting db
#   SLURM_SITE_USERS  (alice bob) ordinary users of the site, made here: members of the project
#                              group SLURM_SITE_GROUP (hpcproj), homes /home/<user> mode 0700
#   SLURM_MARIADB_INITD (1)    1 = start MariaDB with /etc/init.d/mariadb when it exists,
#                              0 = always start mariadbd-safe by hand (fallback path)
set -euo pipefail

NCOMPUTE=${SLURM_NUM_NODES:-2}
NDRILL=${SLURM_DRILL_NODES:-1}
NCPUONLY=${SLURM_CPU_NODES:-1}
NGPUNODES=$((NCOMPUTE + NDRILL))
NNODES=$((NGPUNODES + NCPUONLY))
NCPUS=${SLURM_NODE_CPUS:-4}
MEM_MB=${SLURM_NODE_MEM_MB:-8000}
NGPUS=${SLURM_NODE_GPUS:-4}
ACCT=${SLURM_ACCOUNTING:-1}
CGROUP=${SLURM_CGROUP:-0}
UTS_NS=${SLURM_UTS_NS:-1}
NETNS=${SLURM_NETNS:-1}
NET_PREFIX=${SLURM_NET_PREFIX:-198.18.0}
PORT_BASE=${SLURM_PORT_BASE:-6820}
DB_PASS=${SLURM_DB_PASS:-slurmdbpass}
EXTRA_USERS=${SLURM_EXTRA_USERS:-}
SITE_USERS=${SLURM_SITE_USERS-alice bob}
MARIADB_INITD=${SLURM_MARIADB_INITD:-1}
CLUSTER=local
ETC=/etc/slurm
T_START=$(date +%s.%N)

log() { printf '[start-cluster %6.2fs] %s\n' "$(awk -v a="$(date +%s.%N)" -v b="$T_START" 'BEGIN{print a-b}')" "$*"; }
die() { echo "start-cluster: ERROR: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root"

# Several developers (and CI) may start the cluster at the same moment on one machine: serialise
# runs so two of them never race on configs, pid files or the accounting db.
# daemons are started with 9>&- so they do not inherit (and hold) the lock
exec 9>/run/hpceval-slurm-cluster.lock
flock -w 600 9 || die "another start-cluster.sh/stop-cluster.sh is still running"

# ---------------------------------------------------------------- 0. Debian release
# /etc/debian_version: "12.11" on bookworm, "13.x" on trixie, "trixie/sid" on testing/unstable.
DEB_VER_RAW=$(cat /etc/debian_version 2>/dev/null || echo unknown)
case "$DEB_VER_RAW" in
  12|12.*|bookworm*) DEB_MAJOR=12 ;;
  13|13.*|trixie*)   DEB_MAJOR=13 ;;
  *)                 DEB_MAJOR=0 ;;
esac
case "$DEB_MAJOR" in
  12) log "Debian $DEB_VER_RAW (bookworm): expecting Slurm 22.05" ;;
  13) log "Debian $DEB_VER_RAW (trixie): expecting Slurm 24.11" ;;
  *)  log "WARNING: untested release '$DEB_VER_RAW' (tested: Debian 12, 13); trying anyway" ;;
esac

# pid_alive PIDFILE -> 0 if the pid in PIDFILE is a live (non-zombie) process
# shellcheck source=scripts/slurm/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=scripts/slurm/net.sh
. "$(dirname "${BASH_SOURCE[0]}")/net.sh"
# shellcheck source=scripts/slurm/node-tmp.sh
. "$(dirname "${BASH_SOURCE[0]}")/node-tmp.sh"
# wait_for SECONDS CMD... -> poll CMD every 0.2 s
wait_for() {
  local t=$1; shift; local n=$(( t * 5 ))
  for _ in $(seq "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
  return 1
}
# kill_pidfile PIDFILE -> SIGTERM the pid, wait up to 15 s
kill_pidfile() {
  local f=$1 p
  pid_alive "$f" || { rm -f "$f"; return 0; }
  p=$(cat "$f"); kill "$p" 2>/dev/null || true
  for _ in $(seq 75); do
    if pid_gone "$p"; then break; fi
    sleep 0.2
  done
  rm -f "$f"
}

NODES=(); for i in $(seq 1 "$NNODES"); do NODES+=("node$i"); done
node_range() { if [ "$1" = "$2" ]; then echo "node$1"; else echo "node[$1-$2]"; fi; }
NODE_RANGE=$(node_range 1 "$NNODES")
GPU_NODE_RANGE=$(node_range 1 "$NGPUNODES")  # the nodes with (fake) GPUs; the CPU-only ones after

# ---------------------------------------------------------------- 1. packages
PKGS=(munge slurm-client slurmctld slurmd)
[ "$ACCT" = 1 ] && PKGS+=(slurmdbd mariadb-server)
missing=()
for p in "${PKGS[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing: ${missing[*]}"
  # Keep package scripts from starting daemons with default configs (no systemd here anyway).
  created_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; created_policy=1; fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  [ "$created_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
  log "packages installed"
fi

# ---------------------------------------------------------------- 2. dirs, hosts, fake GPUs
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /etc/munge /var/log/munge
install -d -o munge -g munge -m 0711 /var/lib/munge
install -d -o slurm -g slurm -m 0755 /run/slurm /var/log/slurm /var/lib/slurm /var/lib/slurm/slurmctld /var/lib/slurm/slurmd
for n in "${NODES[@]}"; do install -d -m 0755 "/var/lib/slurm/slurmd/$n"; done

# node names must resolve (slurmd in its UTS namespace resolves its own hostname;
# jobs may use node names as e.g. MASTER_ADDR)
[ -e /etc/hosts ] || touch /etc/hosts
# SlurmctldHost=localhost: minimal images (debootstrap minbase) may ship no /etc/hosts at all
if ! grep -qE '^127\.0\.0\.1[[:space:]].*\blocalhost\b' /etc/hosts; then
  printf '127.0.0.1 localhost # added by start-cluster.sh\n' | cat - /etc/hosts > /etc/hosts.slurmtmp; cat /etc/hosts.slurmtmp > /etc/hosts; rm -f /etc/hosts.slurmtmp
fi
if [ "$NETNS" = 1 ]; then
  net_check || die "SLURM_NETNS=1 needs network namespaces, veth pairs and a bridge: $NET_ERROR (or run with SLURM_NETNS=0, every node on 127.0.0.1)"
  # the bridge (the login address, where slurmctld reaches slurmdbd), then each node on it
  net_bridge_up || die "the site's bridge: $NET_ERROR"
  for n in "${NODES[@]}"; do net_node_up "$n" "${n#node}" || die "network of $n: $NET_ERROR"; done
  hosts_lines=$(net_hosts_lines "${NODES[@]}")
  LOGIN_ADDR=$(net_login_addr)
else
  net_down "${NODES[@]}"  # namespaces of an earlier SLURM_NETNS=1 start: start-node.sh would enter them
  hosts_lines="127.0.0.1 ${NODES[*]} # slurm-local-cluster"
  LOGIN_ADDR=127.0.0.1
fi
if [ "$(grep '# slurm-local-cluster$' /etc/hosts)" != "$hosts_lines" ]; then
  grep -v '# slurm-local-cluster$' /etc/hosts > /etc/hosts.slurmtmp || true
  echo "$hosts_lines" >> /etc/hosts.slurmtmp
  cat /etc/hosts.slurmtmp > /etc/hosts; rm -f /etc/hosts.slurmtmp   # /etc/hosts may be a bind mount: rewrite in place
fi
[ "$NETNS" = 1 ] && net_node_hosts_write "${NODES[@]}"  # nodes whose own name is 127.0.1.1 there

if [ "$NGPUS" -gt 0 ]; then
  # Dummy char devices. Use an unused major (240 = "local/experimental"), NOT /dev/null's 1:3:
  # with ConstrainDevices=yes Slurm would otherwise deny /dev/null itself to jobs.
  for k in $(seq 0 $((NGPUS - 1))); do
    [ -c "/dev/fakegpu$k" ] || { rm -f "/dev/fakegpu$k"; mknod -m 0666 "/dev/fakegpu$k" c 240 "$k"; }
  done
fi

# the site's ordinary users (jobs of tests run as them, not as root): one project group
# (SITE_GROUP, lib.sh); homes not readable by others, as sites make them; marked (SITE_USER_MARK)
# so that stop-cluster.sh --purge removes only the users made here.
getent group "$SITE_GROUP" >/dev/null || groupadd "$SITE_GROUP"
for u in $SITE_USERS; do
  if ! id -u "$u" >/dev/null 2>&1; then
    log "adding user $u (group $SITE_GROUP)"
    useradd --create-home --home-dir "/home/$u" --shell /bin/bash --groups "$SITE_GROUP" \
      --comment "$SITE_USER_MARK" "$u"
  fi
  chmod 0700 "/home/$u"
done
# An ordinary user's ch-run mounts a SquashFS image with squashfuse, which needs /dev/fuse
# usable by every user (0666, as Debian's udev rule and common distributions leave it; a
# container sandbox may start it 0600).
[ ! -c /dev/fuse ] || chmod 0666 /dev/fuse

# ---------------------------------------------------------------- 3. munge
if [ ! -s /etc/munge/munge.key ]; then
  log "creating munge key"
  if command -v mungekey >/dev/null; then mungekey --create --keyfile=/etc/munge/munge.key --force
  else dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none; fi
fi
chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  log "starting munged"
  rm -f /run/munge/munged.pid
  runuser -u munge -- /usr/sbin/munged </dev/null >/dev/null 2>&1 9>&-
  wait_for 10 sh -c 'munge -n | unmunge' || die "munged did not start"
fi

# ---------------------------------------------------------------- 4. config files
write_conf() {  # write_conf PATH OWNER MODE  (content on stdin); rewrites PATH only if content differs
  local path=$1 owner=$2 mode=$3 tmp; tmp=$(mktemp)
  cat > "$tmp"
  if ! cmp -s "$tmp" "$path"; then install -o "${owner%:*}" -g "${owner#*:}" -m "$mode" "$tmp" "$path"; fi
  chown "$owner" "$path"; chmod "$mode" "$path"; rm -f "$tmp"
}

# cgroup/v1 on v1/hybrid hosts (tested on both releases' Slurm here), cgroup/v2 on a pure-v2 host (untested)
CGROUP_PLUGIN=cgroup/v1; [ -e /sys/fs/cgroup/cgroup.controllers ] && CGROUP_PLUGIN=cgroup/v2
if [ "$CGROUP" = 1 ]; then PROCTRACK=proctrack/cgroup; TASKPLUGIN=task/cgroup,task/affinity
else PROCTRACK=proctrack/linuxproc; TASKPLUGIN=task/none; fi
if [ "$ACCT" = 1 ]; then
  ACCT_CONF="AccountingStorageType=accounting_storage/slurmdbd
# the login address, not localhost: sacct in a job on a node reaches slurmdbd across the bridge
AccountingStorageHost=$LOGIN_ADDR
AccountingStoragePort=6819
AccountingStorageTRES=gres/gpu
# as many sites do (hpc-admin-2 N14): each job's submit environment is kept in the database,
# so a secret exported to sbatch is kept there too (sacct --env-vars shows it)
AccountingStoreFlags=job_env
# as sites do: a job needs an association (a user known to slurmdbd), may name only the QOS its
# association grants, and is held to the QOS's limits (QOS short: MaxWall 30 minutes)
AccountingStorageEnforce=associations,limits,qos"
else
  ACCT_CONF="AccountingStorageType=accounting_storage/none"
fi
# partition cpu's own QOS: it must exist in the accounting database before slurmctld reads it
CPU_PARTITION_QOS=""; [ "$ACCT" = 1 ] && CPU_PARTITION_QOS=cpujobs
GRES_NODE=""; GRES_TYPES=""
if [ "$NGPUS" -gt 0 ]; then GRES_NODE=" Gres=gpu:$NGPUS"; GRES_TYPES="GresTypes=gpu"; fi

gen_slurm_conf() {
cat <<EOF
# generated by start-cluster.sh
ClusterName=$CLUSTER
# 'localhost' is accepted by slurmctld whatever the machine's hostname is; nodes and the jobs on
# them reach it at the login address (their own localhost is their own namespace's)
SlurmctldHost=localhost
SlurmctldAddr=$LOGIN_ADDR
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
# a requeued job (node failure, PreemptMode=REQUEUE) waits cred_expire before it starts again:
# 30 s here, not the default 120 s, so the requeue drills do not idle for two minutes each
AuthInfo=cred_expire=30
CredType=cred/munge
StateSaveLocation=/var/lib/slurm/slurmctld
# %n = node name: every slurmd on this host gets its own spool dir, pid file and log
SlurmdSpoolDir=/var/lib/slurm/slurmd/%n
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd-%n.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
ProctrackType=$PROCTRACK
TaskPlugin=$TASKPLUGIN
MpiDefault=none
SchedulerType=sched/backfill
# default batch_sched_delay=3 makes back-to-back sbatch wait ~2.7 s; 0 -> ~0.6 s.
# bf_interval=5 (default 30): a preempting job starts within seconds, not half a minute
SchedulerParameters=batch_sched_delay=0,bf_interval=5
SelectType=select/cons_tres
# memory is not a consumable resource -> jobs without --mem do not block each other
SelectTypeParameters=CR_Core
ReturnToService=2
# accept declared CPUs/memory larger than the real hardware
SlurmdParameters=config_overrides
# fast kill on scancel/timeout (default KillWait=30)
KillWait=2
OverTimeLimit=0
# as most sites: a job above its partition's limits (MaxTime, nodes) is refused at submit, not
# left pending for ever
EnforcePartLimits=ALL
# partitions with a higher PriorityTier preempt lower ones (only "lowprio" is lower)
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
# a node whose slurmd died is DOWN (its jobs NODE_FAIL) after 30 s, not the default 300 s
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
$ACCT_CONF
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
JobCompType=jobcomp/none
$GRES_TYPES
EOF
for i in $(seq 1 "$NNODES"); do
  gres=$GRES_NODE; [ "$i" -gt "$NGPUNODES" ] && gres=""   # CPU-only nodes: no GPUs
  echo "NodeName=node$i NodeAddr=$(node_addr "$i") Port=$((PORT_BASE + i)) CPUs=$NCPUS RealMemory=$MEM_MB$gres State=UNKNOWN"
done
echo "PartitionName=debug Nodes=$(node_range 1 "$NCOMPUTE") Default=YES MaxTime=INFINITE State=UP PriorityTier=10"
# a site's short partition: 30 minutes at most (a sweep judge there is capped and continues in
# successors; a model job asking more is refused)
echo "PartitionName=short Nodes=$(node_range 1 "$NCOMPUTE") Default=NO MaxTime=30 State=UP PriorityTier=10"
if [ "$NDRILL" -gt 0 ]; then
  local drill; drill=$(node_range $((NCOMPUTE + 1)) "$NGPUNODES")
  echo "PartitionName=drill Nodes=$drill Default=NO MaxTime=INFINITE State=UP PriorityTier=10"
  # preemption drills: a job in "drill" preempts one in "lowprio" (SIGTERM, 15 s grace, then gone)
  # or in "requeue" (the same, then Slurm queues it again under its id, as many sites do)
  echo "PartitionName=lowprio Nodes=$drill Default=NO MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=CANCEL GraceTime=15"
  echo "PartitionName=requeue Nodes=$drill Default=NO MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime=15"
fi
# a site's CPU-only partition: nodes without GPUs, for the jobs that need none (aggregation,
# export, image pulls, watch ticks: execution.cpu_partition); 1 hour at most, as such
# partitions often are
if [ "$NCPUONLY" -gt 0 ]; then
  # its own QOS (cpujobs, made below when accounting is on: MaxWall 45 minutes), which caps
  # every job there before the job's own QOS does, as partition QOS do
  echo "PartitionName=cpu Nodes=$(node_range $((NGPUNODES + 1)) "$NNODES") Default=NO MaxTime=60 State=UP PriorityTier=10${CPU_PARTITION_QOS:+ QOS=$CPU_PARTITION_QOS}"
fi
}
write_conf $ETC/slurm.conf root:root 0644 < <(gen_slurm_conf)

if [ "$NGPUS" -gt 0 ]; then
  # gres/gpu in 22.05 DROPS gpus without File= ("Removing file-less GPU"), so File= is required.
  write_conf $ETC/gres.conf root:root 0644 \
    < <(printf 'AutoDetect=off\nNodeName=%s Name=gpu File=/dev/fakegpu[0-%d]\n' "$GPU_NODE_RANGE" $((NGPUS - 1)))
else
  rm -f $ETC/gres.conf
fi
if [ "$CGROUP" = 1 ]; then
  write_conf $ETC/cgroup.conf root:root 0644 \
    < <(printf 'CgroupPlugin=%s\nConstrainCores=yes\nConstrainDevices=yes\nConstrainRAMSpace=yes\n' "$CGROUP_PLUGIN")
else
  rm -f $ETC/cgroup.conf
fi
if [ "$ACCT" = 1 ]; then
  write_conf $ETC/slurmdbd.conf slurm:slurm 0600 <<EOF
AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=slurm
DebugLevel=info
LogFile=/var/log/slurm/slurmdbd.log
PidFile=/run/slurm/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
EOF
  write_conf /etc/mysql/mariadb.conf.d/60-slurm.cnf root:root 0644 <<'EOF'
[mysqld]
innodb_buffer_pool_size=256M
innodb_lock_wait_timeout=900
EOF
fi

# Restart running daemons whose config differs from the one they were started with
# (hash recorded in /run/slurm at start; node-count changes need a slurmctld restart anyway).
CONF_SHA=$( { cat $ETC/slurm.conf $ETC/gres.conf $ETC/cgroup.conf 2>/dev/null || true; } | sha256sum | cut -d' ' -f1)
DBD_SHA=$( { cat $ETC/slurmdbd.conf 2>/dev/null || true; } | sha256sum | cut -d' ' -f1)
if [ "$(cat /run/slurm/conf.sha 2>/dev/null)" != "$CONF_SHA" ]; then
  for f in /run/slurm/slurmd-*.pid /run/slurm/slurmctld.pid; do
    if pid_alive "$f"; then log "config changed: stopping $(basename "$f" .pid)"; fi
    kill_pidfile "$f"
  done
fi
if [ "$ACCT" = 1 ] && [ "$(cat /run/slurm/dbd.sha 2>/dev/null)" != "$DBD_SHA" ] && pid_alive /run/slurm/slurmdbd.pid; then
  log "slurmdbd.conf changed: stopping slurmdbd"; kill_pidfile /run/slurm/slurmdbd.pid
fi

# ---------------------------------------------------------------- 5. MariaDB + slurmdbd
if [ "$ACCT" = 1 ]; then
  if ! mariadb-admin ping >/dev/null 2>&1; then
    log "starting mariadb"
    install -d -o mysql -g mysql -m 0755 /run/mysqld
    if [ ! -d /var/lib/mysql/mysql ]; then   # datadir wiped: re-create system tables
      install -d -o mysql -g mysql -m 0755 /var/lib/mysql
      mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null 2>&1 || die "mariadb-install-db failed"
    fi
    # Both bookworm (10.11) and trixie (11.8.9) ship /etc/init.d/mariadb, which works without systemd.
    # Fallback (no init script, or SLURM_MARIADB_INITD=0): run mariadbd-safe by hand, detached.
    if [ "$MARIADB_INITD" = 1 ] && [ -x /etc/init.d/mariadb ]; then
      setsid /etc/init.d/mariadb start </dev/null >/dev/null 2>&1 9>&- || die "mariadb did not start"
    else
      safe=$(command -v mariadbd-safe || command -v mysqld_safe) || die "no /etc/init.d/mariadb and no mariadbd-safe"
      log "starting mariadb via $safe (no init script)"
      setsid "$safe" --user=mysql --pid-file=/run/mysqld/mysqld.pid </dev/null >/dev/null 2>&1 9>&- &
    fi
    wait_for 30 mariadb-admin ping || die "mariadb not answering"
  fi
  mariadb <<EOF
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
ALTER USER 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
FLUSH PRIVILEGES;
EOF
  if ! pid_alive /run/slurm/slurmdbd.pid; then
    log "starting slurmdbd"
    /usr/sbin/slurmdbd </dev/null >/dev/null 2>&1 9>&-
    echo "$DBD_SHA" > /run/slurm/dbd.sha
  fi
  wait_for 60 sacctmgr -n list cluster || die "slurmdbd not answering (see /var/log/slurm/slurmdbd.log)"
  # The cluster must exist in the db BEFORE slurmctld registers, or no job records are stored.
  if ! sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER"; then
    log "registering cluster '$CLUSTER' in slurmdbd"
    sacctmgr -i add cluster "$CLUSTER" >/dev/null
    [ -e /run/slurm/slurmctld.pid ] && kill_pidfile /run/slurm/slurmctld.pid   # let it re-register
  fi
  sacctmgr -n -P list account format=account | grep -qx default || sacctmgr -i add account default Description=default Organization=local >/dev/null
  for u in root $SITE_USERS $EXTRA_USERS; do
    sacctmgr -n -P list user format=user | grep -qx "$u" || sacctmgr -i add user "$u" DefaultAccount=default >/dev/null
  done
  # a QOS with a MaxWall, the way sites usually cap walltime (hpceval reads it with sacctmgr),
  # enforced (AccountingStorageEnforce above): DenyOnLimit refuses a job above it at submit,
  # rather than leaving it pending for ever. Granted to every user of the site beside "normal";
  # a QOS nobody is granted ("restricted") is refused to all.
  # QOS cpujobs is partition cpu's own QOS (slurm.conf above), granted to nobody: a partition's
  # QOS applies to every job there whatever QOS the job names.
  # QOS few lets a user have 4 jobs pending or running (MaxSubmitJobsPerUser, each array element
  # one) and all its users together 5 (GrpSubmitJobs), as sites cap the queue: a run of more
  # jobs is refused by sbatch midway.
  for q in short restricted cpujobs few; do
    sacctmgr -n -P show qos format=name | grep -qx "$q" || sacctmgr -i add qos "$q" >/dev/null
  done
  sacctmgr -i modify qos short set MaxWall=00:30:00 Flags=DenyOnLimit >/dev/null || true
  sacctmgr -i modify qos cpujobs set MaxWall=00:45:00 Flags=DenyOnLimit >/dev/null || true
  sacctmgr -i modify qos few set MaxSubmitJobsPerUser=4 GrpSubmitJobs=5 >/dev/null || true
  # an account tree as sites give a group one: lab caps its whole queue (GrpSubmitJobs=4, every
  # user's jobs under lab and its sub-accounts together), alice works under lab-nlp and bob
  # under lab-vision (their default account stays "default"). sacctmgr shows a Grp limit only
  # on the account that sets it, so hpceval reads the tree (backends/slurm/accounts.py).
  sacctmgr -n -P list account format=account | grep -qx lab \
    || sacctmgr -i add account lab Description=lab Organization=local >/dev/null
  sacctmgr -i modify account lab set GrpSubmitJobs=4 >/dev/null || true
  for pair in alice:lab-nlp bob:lab-vision; do
    u=${pair%%:*} acct=${pair#*:}
    case " $SITE_USERS " in *" $u "*) ;; *) continue ;; esac
    sacctmgr -n -P list account format=account | grep -qx "$acct" \
      || sacctmgr -i add account "$acct" Parent=lab Description=lab Organization=local >/dev/null
    sacctmgr -n -P show assoc where user="$u" account="$acct" format=account | grep -qx "$acct" \
      || sacctmgr -i add user "$u" Account="$acct" >/dev/null
  done
  for u in root $SITE_USERS $EXTRA_USERS; do
    [ "$(sacctmgr -n -P show assoc where user="$u" format=qos | sort -u)" = "few,normal,short" ] \
      || sacctmgr -i modify user where name="$u" set qos=few,normal,short >/dev/null
  done
fi

# ---------------------------------------------------------------- 6. slurmctld + slurmds
if ! pid_alive /run/slurm/slurmctld.pid; then
  log "starting slurmctld"
  /usr/sbin/slurmctld </dev/null >/dev/null 2>&1 9>&-
  echo "$CONF_SHA" > /run/slurm/conf.sha
fi
wait_for 30 sh -c 'scontrol ping | grep -q "is UP"' || die "slurmctld not answering (see /var/log/slurm/slurmctld.log)"

for n in "${NODES[@]}"; do
  # a slurmd outside its node's namespace (started with SLURM_NETNS=0, or the namespace was
  # made again after a crash) restarts in it
  if [ "$NETNS" = 1 ] && pid_alive "/run/slurm/slurmd-$n.pid" && ! net_node_ok "$n" "$(cat "/run/slurm/slurmd-$n.pid")"; then
    log "slurmd $n runs outside its network namespace: restarting it"; kill_pidfile "/run/slurm/slurmd-$n.pid"
  fi
  if [ "$NETNS" = 1 ] && pid_alive "/run/slurm/slurmd-$n.pid" && ! net_node_hosts_ok "$n" "$(cat "/run/slurm/slurmd-$n.pid")"; then
    log "slurmd $n does not see its own hosts file: restarting it"; kill_pidfile "/run/slurm/slurmd-$n.pid"
  fi
  # a slurmd that sees another /tmp than its node's (node-tmp.sh), or a shared folder there that
  # was removed and made again here since it started, restarts with the right ones
  if pid_alive "/run/slurm/slurmd-$n.pid" && ! node_tmp_ok "$n" "$(cat "/run/slurm/slurmd-$n.pid")"; then
    log "slurmd $n does not see its node's /tmp (or the site's scratch as a slave mount): restarting it"; kill_pidfile "/run/slurm/slurmd-$n.pid"
  fi
  if ! pid_alive "/run/slurm/slurmd-$n.pid"; then
    log "starting slurmd $n (address $(node_addr "${n#node}"))"
    SLURM_UTS_NS=$UTS_NS bash "$(dirname "${BASH_SOURCE[0]}")/start-node.sh" "$n" </dev/null >/dev/null 2>&1 9>&- \
      || die "slurmd $n did not start (see /var/log/slurm/slurmd-$n.log)"
  fi
done

# ---------------------------------------------------------------- 6b. the site's HTTP proxy
# The nodes' only way out, as on sites that give compute nodes a proxy: http://login:3128
# (scripts/slurm/site_proxy.py; it reaches this machine's loopback under *.outside.test names,
# nothing else). Jobs that need the outside export https_proxy/http_proxy.
PROXY_PID=/run/slurm/site-proxy.pid
if [ "$NETNS" = 1 ] && ! pid_alive "$PROXY_PID"; then
  log "starting the site's HTTP proxy on $LOGIN_ADDR:3128"
  setsid python3 "$(dirname "${BASH_SOURCE[0]}")/site_proxy.py" --host "$LOGIN_ADDR" --port 3128 \
    --log /var/log/slurm/site-proxy.log --pid-file "$PROXY_PID" \
    </dev/null >>/var/log/slurm/site-proxy.err 2>&1 9>&- &
  wait_for 10 test -s "$PROXY_PID" || die "the site's HTTP proxy did not start (see /var/log/slurm/site-proxy.err)"
fi

# ---------------------------------------------------------------- 7. wait until every node is usable
nodes_ready() {
  # one line per node and partition: a node in two partitions is counted once
  local states; states=$(sinfo -h -N -n "$NODE_RANGE" -o '%N %T' 2>/dev/null | sort -u) || return 1
  [ "$(echo "$states" | grep -cE ' (idle|mixed|allocated|completing)$')" = "$NNODES" ]
}
for _ in $(seq 150); do
  nodes_ready && break
  # nodes left DOWN/DRAIN/INVAL by an earlier run: resume them once they are responding
  bad=$(sinfo -h -N -n "$NODE_RANGE" -o '%N %T' 2>/dev/null | awk '$2 ~ /down|drain|inval|fail/ && $2 !~ /\*/ {print $1}' | paste -sd, -)
  if [ -n "$bad" ]; then scontrol update nodename="$bad" state=resume 2>/dev/null || true; fi
  sleep 0.2
done
nodes_ready || { sinfo -N -l; die "nodes not ready (see /var/log/slurm/slurmd-*.log)"; }
log "cluster ready (Debian $DEB_VER_RAW, $(sinfo -V 2>/dev/null))"
sinfo -N -o '%N %T %c %m %G'
