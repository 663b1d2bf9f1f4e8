# Helpers shared by start-cluster.sh and stop-cluster.sh (sourced, not run).

# The site's ordinary users: their project group, and the mark in their GECOS field by which
# stop-cluster.sh --purge knows the users start-cluster.sh made (and removes only those).
# shellcheck disable=SC2034  # read by the scripts that source this file
SITE_GROUP=${SLURM_SITE_GROUP:-hpcproj}
# shellcheck disable=SC2034
SITE_USER_MARK="hpceval dev site user"

# pid_alive PIDFILE -> true while the pid in PIDFILE runs (a zombie counts as gone)
pid_alive() {
  local f=$1 p
  [ -s "$f" ] || return 1
  p=$(cat "$f" 2>/dev/null) || return 1
  [ -n "$p" ] && ! pid_gone "$p"
}

# pid_gone PID -> true once PID has exited (or is a zombie waiting for its parent)
pid_gone() {
  [ ! -d "/proc/$1" ] || grep -q '^State:.*Z' "/proc/$1/status" 2>/dev/null
}
