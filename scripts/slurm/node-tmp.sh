# shellcheck shell=bash
# Node-local /tmp and the site's shared scratch (sourced by start-cluster.sh, start-node.sh and
# stop-cluster.sh, not run).
#
# On a real site /tmp is each node's own disk (or a per-job tmpfs): nothing passes between nodes,
# or between the login node and a node, through it. Here every node's slurmd (and so every job
# step on that node) runs in a mount namespace of its own, whose /tmp is the node's folder
# $NODE_TMP_ROOT/<node>, and whose /var/tmp is $NODE_TMP_ROOT/<node>.var-tmp (ch-run mounts
# images and keeps its storage there: per node, as on a real site). Shared storage is what a
# parallel file system would be: the checkout, /home, the site's scratch ($SITE_SCRATCH, mode
# 1777, as /scratch or $WORK on a real site) and,
# for the tests, the folders under /tmp that node_tmp_shared lists (pytest's tmp_path folders
# live under /tmp/pytest-of-<user>; a checkout cloned under /tmp), bound at the same path into
# every node's /tmp.
#   SLURM_NODE_TMP (1)     0 = every node sees this machine's /tmp
#   SLURM_SHARED_TMP ("")  more folders under /tmp to share with every node (colon-separated)
#   SLURM_SCRATCH (/srv/scratch)  the site's shared scratch

NODE_TMP=${SLURM_NODE_TMP:-1}
NODE_TMP_ROOT=/var/lib/hpceval-node-tmp
SITE_SCRATCH=${SLURM_SCRATCH:-/srv/scratch}

node_tmp_dir() { echo "$NODE_TMP_ROOT/$1"; }
node_var_tmp_dir() { echo "$NODE_TMP_ROOT/$1.var-tmp"; }

# node_tmp_shared -> the folders under /tmp that every node shares with this machine, one per line
node_tmp_shared() {
  local repo
  repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
  echo /tmp/pytest-of-root
  case $repo/ in /tmp/*) echo "$repo" ;; esac
  tr ':' '\n' <<< "${SLURM_SHARED_TMP:-}" | grep '^/tmp/.' || true
}

# node_tmp_prepare NODE... -> each node's /tmp folder (1777, as /tmp) and the shared folders
# exist, each shared folder (and the site's scratch) a shared mount of its own: what is mounted
# below it here later (a test's small tmpfs for a full disk, as a quota on a parallel file
# system is the same from every node) reaches every node, whose mount namespace is its slave
node_tmp_prepare() {
  local n p
  install -d -m 1777 "$SITE_SCRATCH"
  mountpoint -q "$SITE_SCRATCH" || mount --bind "$SITE_SCRATCH" "$SITE_SCRATCH"
  mount --make-shared "$SITE_SCRATCH"
  [ -d /tmp/pytest-of-root ] || install -d -m 0700 /tmp/pytest-of-root  # pytest's own mode
  while IFS= read -r p; do
    [ -d "$p" ] || continue
    mountpoint -q "$p" || mount --bind "$p" "$p"
    mount --make-shared "$p"
  done < <(node_tmp_shared)
  for n in "$@"; do install -d -m 1777 "$(node_tmp_dir "$n")" "$(node_var_tmp_dir "$n")"; done
}

# node_tmp_mounts NODE -> the commands (for `unshare --mount --propagation slave ... sh -c`) that
# give NODE's mount namespace its own /tmp: each shared folder bound into the node's folder at
# its own path, then the node's folder (with those binds: rbind) over /tmp; and its own
# /dev/shm, as a real node has: shared memory is how vLLM, torch and NCCL tell processes on one
# node from those on others, and one /dev/shm for every node made vLLM take two nodes for one
# (its message queue then went over /tmp's Unix sockets, which do not cross nodes)
node_tmp_mounts() {
  local dir p out=""
  dir=$(node_tmp_dir "$1")
  while IFS= read -r p; do
    [ -d "$p" ] || continue
    out+="mkdir -p '$dir${p#/tmp}' && mount --bind '$p' '$dir${p#/tmp}' && "
  done < <(node_tmp_shared)
  echo "${out}mount --rbind '$dir' /tmp && mount --bind '$(node_var_tmp_dir "$1")' /var/tmp && mount -t tmpfs -o mode=1777 tmpfs /dev/shm && "
}

# node_tmp_ok NODE PID -> true when PID sees what NODE should see as /tmp: the node's own folder
# with every shared folder in it (the same folders as this machine's, not a removed one), and a
# /var/tmp and /dev/shm of its own; or, with SLURM_NODE_TMP=0, this machine's /tmp
node_tmp_ok() {
  local p root=/proc/$2/root
  if [ "$NODE_TMP" != 1 ]; then
    [ "$(stat -c %d:%i "$root/tmp" 2>/dev/null)" = "$(stat -c %d:%i /tmp)" ]; return
  fi
  [ "$(stat -c %d:%i "$root/tmp" 2>/dev/null)" = "$(stat -c %d:%i "$(node_tmp_dir "$1")")" ] || return 1
  [ "$(stat -c %d:%i "$root/var/tmp" 2>/dev/null)" = "$(stat -c %d:%i "$(node_var_tmp_dir "$1")")" ] || return 1
  [ "$(stat -c %d "$root/dev/shm" 2>/dev/null)" != "$(stat -c %d /dev/shm)" ] || return 1
  # the scratch a slave of this machine's (a node started before it was a shared mount is not)
  awk -v s="$SITE_SCRATCH" '$5 == s && / master:/ {found = 1} END {exit !found}' \
    "/proc/$2/mountinfo" || return 1
  while IFS= read -r p; do
    [ -d "$p" ] || continue
    [ "$(stat -c %d:%i "$root$p" 2>/dev/null)" = "$(stat -c %d:%i "$p")" ] || return 1
  done < <(node_tmp_shared)
}
