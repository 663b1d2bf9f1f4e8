"""execution.type local: the same rendered job script, run with bash on this machine.

A small runner script (local.sh, written into the run directory, so what runs can be read)
runs each model's job script in turn under timeout(1): USR1 `signal_seconds` before the
walltime, like `#SBATCH --signal=B:USR1@N`, then KILL at the walltime. It is started in its own
session (setsid), so `kill` can signal the whole process group; its pid and the pid's start
time go into jobs.json (a pid alone can be reused by an unrelated process later).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from hpceval.runs.jobs import JobEntry

if TYPE_CHECKING:
    from hpceval.runs.rundir import ModelPlan

RC_FILE = "local.rc"  # models/<key>/local.rc: the job script's exit status
LOG_FILE = "local.log"  # models/<key>/local.log: its output (what Slurm's --output would hold)
RUNNER_LOG = "logs/local-runner.log"
_WALLTIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


def walltime_seconds(text: str) -> int:
    """Slurm's time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S."""
    match = _WALLTIME.match(text.strip())
    if match is None:
        raise ValueError(f"not a Slurm time limit: {text!r}")
    days, a, b, c = (int(g) if g else None for g in match.groups())
    assert a is not None
    if days is None:
        if b is None:
            return a * 60
        return a * 60 + b if c is None else (a * 60 + b) * 60 + c
    return ((days * 24 + a) * 60 + (b or 0)) * 60 + (c or 0)


def runner_script(run_dir: Path, models: Sequence[ModelPlan], walltime: str,
                  signal_seconds: int, python: str) -> str:
    total = walltime_seconds(walltime)
    warn = signal_seconds if total > signal_seconds else 0
    keys = " ".join(shlex.quote(m.key) for m in models)
    scripts = "\n".join(f"  [{shlex.quote(m.key)}]={shlex.quote(m.script_name)}" for m in models)
    aggregate = ""
    if len(models) > 1:
        aggregate = (f'{shlex.quote(python)} -m hpceval.results.table aggregate --run-dir '
                     f'"$RUN_DIR" >> "$RUN_DIR/logs/aggregate-local.log" 2>&1\n')
    return f"""#!/bin/bash
# hpceval local runner (execution.type local): runs the job script of each model in turn on
# this machine. Walltime {walltime}: USR1 {warn} s before it (as #SBATCH --signal would), KILL
# at the end. Usage: local.sh [MODEL_KEY...] (default: every model; resume passes the
# unfinished ones). Each model's output goes to models/<key>/{LOG_FILE}, its status to {RC_FILE}.
set -u
RUN_DIR={shlex.quote(str(run_dir))}
declare -A SCRIPT=(
{scripts}
)
ORDER=({keys})
if [ $# -gt 0 ]; then ORDER=("$@"); fi
for key in "${{ORDER[@]}}"; do rm -f "$RUN_DIR/models/$key/{RC_FILE}"; done
for key in "${{ORDER[@]}}"; do
  timeout --signal=USR1 --kill-after={warn or 1} {total - warn} \\
    bash "$RUN_DIR/${{SCRIPT[$key]}}" >> "$RUN_DIR/models/$key/{LOG_FILE}" 2>&1
  echo "$?" > "$RUN_DIR/models/$key/.{RC_FILE}.tmp"
  mv -f "$RUN_DIR/models/$key/.{RC_FILE}.tmp" "$RUN_DIR/models/$key/{RC_FILE}"
done
{aggregate}"""


def _proc_start(pid: int) -> tuple[int, str] | None:
    """(start time in clock ticks since boot, state letter) of a live pid, from /proc."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # the command name may hold spaces and ')'
    return int(fields[19]), fields[0]


def start_local(run_dir: Path, models: Sequence[int], keys: Sequence[str] = (),
                reason: str = "submit") -> JobEntry:
    """Start local.sh in the background, in its own session; returns its jobs.json entry."""
    log = (run_dir / RUNNER_LOG).open("ab")
    try:
        proc = subprocess.Popen(["bash", str(run_dir / "local.sh"), *keys], cwd=run_dir,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)
    finally:
        log.close()
    started = _proc_start(proc.pid)
    return JobEntry(f"local-{proc.pid}", "local", "main", tuple(models), False, time.time(),
                    reason, pid=proc.pid, pid_start=started[0] if started else None,
                    host=socket.gethostname())


def local_alive(entry: JobEntry) -> bool | None:
    """True/False for a runner on this host; None when it ran on another host (cannot tell)."""
    if entry.pid is None:
        return False
    if entry.host and entry.host != socket.gethostname():
        return None
    found = _proc_start(entry.pid)
    if found is None or found[1] == "Z":  # gone, or a zombie waiting for its parent
        return False
    # A pid whose start time is unknown is not ours: jobs.json may be forged or the pid reused,
    # and `kill` must never signal a process it cannot verify.
    return entry.pid_start is not None and found[0] == entry.pid_start


def kill_local(entry: JobEntry, grace_s: float = 45.0) -> bool:
    """TERM the runner's process group (the job's EXIT trap stops its servers), KILL after
    `grace_s`; True once nothing of it runs. The job script gives each server 30 s to stop."""
    if not local_alive(entry) or entry.pid is None:
        return local_alive(entry) is not True
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(entry.pid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + (grace_s if sig == signal.SIGTERM else 5.0)
        while time.monotonic() < deadline:
            if not local_alive(entry):
                return True
            time.sleep(0.2)
    return not local_alive(entry)
