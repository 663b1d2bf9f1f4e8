"""The only place in hpceval that runs sbatch, sacct, scancel, squeue and scontrol.

Everything else talks to the small `SlurmClient` protocol, so unit tests inject a fake and the
integration tests use `CommandSlurmClient` against the real dev cluster (scripts/slurm/).
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Protocol

from hpceval.backends.slurm.formats import overridden_inputs
from hpceval.backends.slurm.records import (
    DEFAULT_MAX_ARRAY_SIZE,
    SACCT_FIELDS,
    SQUEUE_FORMAT,
    JobRecord,
    QueueEntry,
    SlurmParseError,
    parse_max_array_size,
    parse_sacct,
    parse_sbatch_id,
    parse_squeue,
    unique_base_ids,
)
from hpceval.errors import HpcevalError

log = logging.getLogger(__name__)

# Messages that mean "that job is already gone", which is what a cancel or a queue look-up of a
# finished job is allowed to find. Newer Slurm releases turn them into a non-zero exit status.
_GONE_MARKERS = ("Invalid job id specified", "already completing or completed")

Runner = Callable[..., "subprocess.CompletedProcess[str]"]

# MaxArraySize, read once per process (and Slurm installation, and runner: a test's fake runner
# is a cluster of its own): it changes only when an admin edits slurm.conf
_MAX_ARRAY_SIZES: dict[tuple[Path | None, Runner], int] = {}


class SlurmError(HpcevalError, RuntimeError):
    """A Slurm command failed; carries the command line and its stderr for the error message."""

    def __init__(self, command: Sequence[str], returncode: int | None, stderr: str) -> None:
        self.command = list(command)
        self.returncode = returncode
        self.stderr = stderr.strip()
        status = "could not run" if returncode is None else f"exited {returncode}"
        detail = f": {self.stderr}" if self.stderr else ""
        super().__init__(f"`{' '.join(self.command)}` {status}{detail}")


class SlurmClient(Protocol):
    """What hpceval needs from Slurm. Job ids are strings: "12", "12_3" for array tasks."""

    def submit(
        self,
        script_path: Path,
        *,
        extra_args: Sequence[str] = (),
        dependency: str | None = None,
        script_args: Sequence[str] = (),
    ) -> str: ...

    def max_array_size(self) -> int: ...

    def sacct(
        self, job_ids: Sequence[str], *, starttime: datetime | None = None
    ) -> dict[str, JobRecord]: ...

    def cancel(self, job_ids: Sequence[str]) -> None: ...

    def squeue(self, job_ids: Sequence[str]) -> dict[str, QueueEntry]: ...


def format_starttime(when: datetime) -> str:
    """sacct -S wants local wall-clock time; aware datetimes are converted to local first."""
    if when.tzinfo is not None:
        when = when.astimezone().replace(tzinfo=None)
    return when.strftime("%Y-%m-%dT%H:%M:%S")


class CommandSlurmClient:
    """`SlurmClient` that runs the real Slurm commands (no shell; arguments passed as a list)."""

    def __init__(
        self,
        *,
        bin_dir: Path | None = None,
        timeout_s: float = 60.0,
        runner: Runner = subprocess.run,
    ) -> None:
        self._bin_dir = bin_dir
        self._timeout_s = timeout_s
        self._runner = runner

    # -- commands ---------------------------------------------------------------------------

    def submit(
        self,
        script_path: Path,
        *,
        extra_args: Sequence[str] = (),
        dependency: str | None = None,
        script_args: Sequence[str] = (),
    ) -> str:
        """sbatch; `script_args` follow the script (the job script's own $1, $2, ...)."""
        args = ["--parsable", *extra_args]
        if dependency:
            args.append(f"--dependency={dependency}")
        ignored = _overridden(script_path, args)
        args += [str(script_path), *script_args]
        command, result = self._run("sbatch", args, unset=ignored)
        try:
            return parse_sbatch_id(result.stdout)
        except SlurmParseError as exc:
            raise SlurmError(command, result.returncode, f"{exc}; stderr: {result.stderr}") from exc

    def max_array_size(self) -> int:
        """The cluster's MaxArraySize (an array's indices stay below it): ONE ``scontrol show
        config`` per process. Slurm's default (1001) when it cannot be read, said in a debug
        line (sbatch then names the real limit if a sweep exceeds it)."""
        key = (self._bin_dir, self._runner)
        if key not in _MAX_ARRAY_SIZES:
            try:
                _, result = self._run("scontrol", ["show", "config"])
                _MAX_ARRAY_SIZES[key] = parse_max_array_size(result.stdout)
            except (SlurmError, SlurmParseError) as exc:
                log.debug("MaxArraySize unreadable (%s); assuming Slurm's default %d", exc,
                          DEFAULT_MAX_ARRAY_SIZE)
                _MAX_ARRAY_SIZES[key] = DEFAULT_MAX_ARRAY_SIZE
        return _MAX_ARRAY_SIZES[key]

    def test_only(self, script_path: Path, *, extra_args: Sequence[str] = ()) -> str:
        """``sbatch --test-only``: would Slurm take this job (partition, account, QOS, limits)?
        Queues nothing; returns sbatch's answer ("Job N to start at ..."), SlurmError if not."""
        args = ["--test-only", *extra_args]
        ignored = _overridden(script_path, args)
        _, result = self._run("sbatch", [*args, str(script_path)], unset=ignored)
        return (result.stderr or result.stdout).strip()

    def sacct(
        self, job_ids: Sequence[str], *, starttime: datetime | None = None
    ) -> dict[str, JobRecord]:
        """Records for the given jobs; array ids are widened to their base so all tasks come back.

        `starttime` (-S) hides older jobs that had the same id (ids restart after a controller
        state wipe): pass a time a little before the jobs were submitted.
        """
        if not job_ids:
            return {}
        args = [
            "--parsable2",
            "--noheader",
            "-X",
            "-o",
            ",".join(SACCT_FIELDS),
            "-j",
            ",".join(unique_base_ids(job_ids)),
        ]
        if starttime is not None:
            # sacct rejects a start time in the future ("after end time"), which a fast clock or
            # a caller's rounding could produce: a filter that late would hide the jobs anyway.
            latest = datetime.now().astimezone() - timedelta(seconds=1)
            aware = starttime if starttime.tzinfo else starttime.astimezone()
            args += ["-S", format_starttime(min(aware, latest))]
        command, result = self._run("sacct", args)
        try:
            return parse_sacct(result.stdout)
        except SlurmParseError as exc:
            raise SlurmError(command, result.returncode, str(exc)) from exc

    def cancel(self, job_ids: Sequence[str]) -> None:
        """scancel; cancelling a job that already ended is not an error (it is what we wanted)."""
        if job_ids:
            self._run("scancel", list(job_ids), tolerate_gone=True)

    def squeue(self, job_ids: Sequence[str]) -> dict[str, QueueEntry]:
        """What the controller knows now (incl. recently finished jobs), array tasks one a line."""
        if not job_ids:
            return {}
        args = ["--noheader", "--array", "--states=all", "--format", SQUEUE_FORMAT]
        args += ["--jobs", ",".join(job_ids)]
        command, result = self._run("squeue", args, tolerate_gone=True)
        try:
            return parse_squeue(result.stdout)
        except SlurmParseError as exc:
            raise SlurmError(command, result.returncode, str(exc)) from exc

    # -- plumbing ---------------------------------------------------------------------------

    def _run(
        self, program: str, args: Sequence[str], *, tolerate_gone: bool = False,
        unset: Sequence[str] = (),
    ) -> tuple[list[str], subprocess.CompletedProcess[str]]:
        executable = str(self._bin_dir / program) if self._bin_dir else program
        command = [executable, *args]
        # A user's SLURM_TIME_FORMAT=relative would turn timestamps into "Tomorrow 10:00".
        env = {**{k: v for k, v in os.environ.items() if k not in unset},
               "SLURM_TIME_FORMAT": "standard"}
        log.debug("running %s", command)
        try:
            result = self._runner(
                command,
                capture_output=True,
                text=True,
                env=env,
                timeout=self._timeout_s,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except FileNotFoundError as exc:
            raise SlurmError(command, None, f"{program} not found (is Slurm installed?)") from exc
        except subprocess.TimeoutExpired as exc:
            raise SlurmError(command, None, f"timed out after {self._timeout_s:g} s") from exc
        except OSError as exc:
            raise SlurmError(command, None, str(exc)) from exc
        if result.returncode != 0 and not (tolerate_gone and _only_gone(result.stderr)):
            raise SlurmError(command, result.returncode, result.stderr)
        return command, result


def _overridden(script_path: Path, args: Sequence[str]) -> list[str]:
    """The submit environment's SBATCH_* variables that would override what the job sets
    itself (formats.overridden_inputs), said once per submit: they are left out."""
    try:
        text = script_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""  # sbatch names the missing script itself
    ignored = overridden_inputs(text, list(args), dict(os.environ))
    if ignored:
        log.warning("not applied from your environment: %s (the job sets those options "
                    "itself, as hpceval render shows)",
                    ", ".join(f"{name}={os.environ[name]}" for name in ignored))
    return ignored


def _only_gone(stderr: str) -> bool:
    lines = [line for line in stderr.splitlines() if line.strip()]
    return bool(lines) and all(any(m in line for m in _GONE_MARKERS) for line in lines)


def queue_state(job_id: str) -> str | None:
    """One job's state from squeue, for code inside a job that holds no client (a cache
    compaction judging another job's lease); "" when Slurm no longer knows the job, None
    when Slurm can't say."""
    try:
        done = subprocess.run(["squeue", "--noheader", "--format=%T", "--jobs", job_id],
                              capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return "" if "Invalid job id" in done.stderr else None
    return done.stdout.strip().split("\n")[0].strip()
