# Helpers shared by start-cluster.sh and stop-cluster.sh (sourced, not run).

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
