"""The local backend: the same rendered job script, run with bash on this machine.

A small runner script (local.sh, written into the run directory, so what runs can be read)
runs each model's job script in turn under timeout(1): USR1 `signal_seconds` before the
walltime, like `#SBATCH --signal=B:USR1@N`, then KILL at the walltime. It is started in its own
session (setsid), so `kill` can signal the whole process group; its pid and the pid's start
time go into jobs.json (a pid alone can be reused by an unrelated process later). A sweep's
table is written by the runner itself after the last model: no separate aggregation job.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ClassVar

from hpceval.backends.base import (
    BackendFiles,
    BackendSettings,
    CancelReport,
    CpuJob,
    JobEntry,
    JobInfo,
    JobQuery,
    JobRequest,
    JobUsage,
    UsageQuery,
)
from hpceval.backends.views import ExecutionView, JobView, RunView
from hpceval.contract import (
    JOB_FILES,
    LOCAL_LOG_FILE,
    LOCAL_RC_FILE,
    LOCAL_RUNNER,
    LOCAL_RUNNER_LOG,
    LOCAL_USAGE_FILE,
    model_dir,
)
from hpceval.durations import walltime_seconds
from hpceval.errors import ConfigIssue, HpcevalError
from hpceval.phases import JobStatus, Phase
from hpceval.records import Role

RUNNER_TEMPLATE = "local.sh.j2"


class LocalBackend:
    name: ClassVar[str] = "local"

    @classmethod
    def from_settings(cls, settings: BackendSettings) -> LocalBackend:
        """The registry's factory (``hpceval.backends.BACKENDS``): no settings to read."""
        return cls()
    resubmits_itself: ClassVar[bool] = False  # the runner's timeout ends the run
    # no scheduler keeps a record of an ended runner (`query`); what each attempt held is in
    # the runner's own record (`usage`)
    accounted: ClassVar[bool] = False
    multi_node: ClassVar[bool] = False
    srun_steps: ClassVar[bool] = False  # no srun here: pyxis cannot start containers
    confines_jobs: ClassVar[bool] = False  # a workstation's processes: docker is fine here
    schedules_later: ClassVar[bool] = False  # no queue: a job starts now or not at all
    # the runner runs one model's job after the other: a judge job beside them would need a
    # second runner and a stop protocol of its own (scope: sweep is refused; scope: job works)
    side_by_side: ClassVar[bool] = False
    partitions: ClassVar[bool] = False
    runs_here: ClassVar[bool] = True
    pulls_ahead: ClassVar[bool] = False  # the job pulls what it needs: no GPU is held for others
    own_jobs_command: ClassVar[str] = "ps -u $USER"
    partials: ClassVar[str] = "backends/local"  # templates/backends/local/: plain processes

    def scripts(self, files: BackendFiles) -> dict[str, str]:
        return {LOCAL_RUNNER: runner_script(files)}

    def submit(self, run_dir: Path, request: JobRequest) -> list[JobEntry]:
        """Start local.sh in the background, in its own session (the runner runs the request's
        models in turn, or every model when it names none)."""
        log = (run_dir / LOCAL_RUNNER_LOG).open("ab")
        try:
            proc = subprocess.Popen(["bash", str(run_dir / LOCAL_RUNNER), *request.keys],
                                    cwd=run_dir, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    close_fds=True)
        finally:
            log.close()
        started = _proc_start(proc.pid)
        return [JobEntry(f"local-{proc.pid}", self.name, request.role, request.models, False,
                         time.time(), request.reason, pid=proc.pid,
                         pid_start=started[0] if started else None, host=socket.gethostname())]

    def states(self, queries: Sequence[JobQuery], *, force: bool = False) -> list[JobStatus]:
        return [local_status(q.entry, q.model_dir) for q in queries]

    def cancel(self, run_dir: Path, entries: Sequence[JobEntry], *,
               mark: Callable[[list[str]], None], verify_s: float,
               sleep: Callable[[float], None], run_id: str | None = None) -> CancelReport:
        # a runner is this run's when its pid's start time matches (local_alive): no comment
        live = [e for e in entries if local_alive(e)]
        mark([e.id for e in live])
        left = [e.id for e in live if not kill_local(e)]
        return CancelReport([e.id for e in live], left, {e.id: "ended" for e in live})

    scheduler_calls = 0  # no scheduler: the runner's own files are read

    def job_runs(self, job_id: str) -> bool | None:
        return None  # one machine: a lease's process is asked directly (same host)

    def job_states(self, jobs: Sequence[tuple[str, float]], *, ask: bool = True
                   ) -> list[JobStatus]:
        # no job here is anything but a run's (a watch needs a backend that schedules later)
        return [JobStatus(Phase.UNKNOWN, "not a job of a run: the local backend keeps no "
                          "other jobs") for _ in jobs]

    def query(self, job_ids: Sequence[str], *, queue: bool = False) -> dict[str, JobInfo]:
        """The runners among `job_ids` (local-<pid>) still running on this machine. No record
        outlives a runner: an ended one is absent, its models' status is on disk."""
        found = {}
        for job_id in job_ids:
            pid = job_id.removeprefix("local-")
            proc = _proc_start(int(pid)) if pid.isdigit() and pid != job_id else None
            if proc is not None and proc[1] != "Z":
                found[job_id] = JobInfo(JobStatus(Phase.RUNNING, "", "running"))
        return found

    def usage(self, jobs: Sequence[UsageQuery], *, ask: bool = True) -> list[JobUsage | None]:
        """From the runner's own record (models/<key>/local.usage, a line per attempt, written
        when the model's script ends): no scheduler to ask; a model still running is None."""
        return [local_usage(job) for job in jobs]

    def resubmit_after(self, run_dir: Path, script: Path, after: Sequence[str], *,
                       role: Role) -> JobEntry:
        raise HpcevalError(f"the local backend queues no job after another ({role} after "
                           f"{', '.join(after)})", "run it again by hand once they have ended")

    def log_path(self, run_dir: Path, key: str, index: int, entry: JobEntry) -> Path:
        return self.own_log(model_dir(run_dir, key), entry)

    def own_log(self, folder: Path, entry: JobEntry) -> Path:
        return folder / LOCAL_LOG_FILE

    def describe(self, entry: JobEntry, models: int) -> str:
        return f"local runner {entry.id} (this machine)"

    # No scheduler reads a job script here: bash runs it as it is, so it has no header, and a
    # config value is never written on a directive line. The runner's timeout is the walltime.

    def header(self, spec: RunView, ctx: JobView, log_dir: str, nodes: int, *,
               role: Role = Role.MAIN) -> list[str]:
        return []

    def cpu_header(self, ex: ExecutionView, job: CpuJob) -> list[str]:
        return []

    def log_name(self, role: str) -> str:
        return f"{role}.log"

    def walltime_within(self, ex: ExecutionView, wanted: str) -> tuple[str, bool]:
        return wanted, False  # no limit above the config's: one allocation to the end

    def spec_issues(self, ex: ExecutionView, *, ask: bool) -> list[ConfigIssue]:
        return []

    def submit_issues(self, ex: ExecutionView, jobs: Sequence[Role]) -> list[ConfigIssue]:
        return []  # one machine, no queue limits


def runner_script(files: BackendFiles) -> str:
    """local.sh, from templates/local.sh.j2 (every value shell-quoted by the renderer)."""
    if files.render is None:
        raise ValueError("the local runner is rendered from templates/: BackendFiles.render is "
                         "required")
    total = walltime_seconds(files.walltime)
    warn = files.signal_seconds if total > files.signal_seconds else 0
    return files.render(RUNNER_TEMPLATE, {
        "walltime": files.walltime, "warn": warn, "total": total,
        "run_dir": str(files.run_dir), "models": list(files.models),
        "keys": [key for key, _ in files.models], "python": files.python,
        "files": JOB_FILES, "export_args": list(files.export_args), "gpus": files.gpus})


def local_status(entry: JobEntry, model_dir: Path) -> JobStatus:
    rc_file = model_dir / LOCAL_RC_FILE
    if rc_file.is_file():
        text = rc_file.read_text().strip()
        rc = int(text) if text.lstrip("-").isdigit() else 1
        if rc == 0:
            return JobStatus(Phase.DONE, "", "exit 0")
        if entry.cancelled_at:
            return JobStatus(Phase.CANCELLED, "cancelled by hpceval kill", f"exit {rc}")
        why = {124: "walltime reached", 137: "killed at the walltime",
               143: "stopped (signal)"}.get(rc, f"exit code {rc}")
        return JobStatus(Phase.FAILED, why, f"exit {rc}")
    alive = local_alive(entry)
    if alive is None:
        return JobStatus(Phase.UNKNOWN, f"runs on host {entry.host}; ask there")
    if alive:
        log = model_dir / LOCAL_LOG_FILE
        started = log.is_file() and log.stat().st_mtime >= entry.submitted_at - 1
        return JobStatus(Phase.RUNNING if started else Phase.QUEUED,
                         "" if started else "waiting for the models before it")
    if entry.cancelled_at:
        return JobStatus(Phase.CANCELLED, "cancelled by hpceval kill")
    return JobStatus(Phase.FAILED, "the local runner ended without a status")


def local_usage(job: UsageQuery) -> JobUsage | None:
    """The runner's line for this attempt: its id, started no earlier than it was submitted
    (a pid, and so an id, can come back in a later run of the same directory)."""
    try:
        lines = (model_dir(job.run_dir, job.key) / LOCAL_USAGE_FILE).read_text().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        words = line.split()
        if len(words) != 4 or words[0] != job.job_id or not all(w.isdigit() for w in words[1:]):
            continue
        start, end, gpus = map(int, words[1:])
        if start >= job.submitted_at - 1:
            return JobUsage(job.job_id, max(end - start, 0), gpus, 1, True)  # one machine
    return None


def _proc_start(pid: int) -> tuple[int, str] | None:
    """(start time in clock ticks since boot, state letter) of a live pid, from /proc."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # the command name may hold spaces and ')'
    return int(fields[19]), fields[0]


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
