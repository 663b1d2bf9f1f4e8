"""CommandSlurmClient: command lines it builds and how it reports failures (no cluster needed)."""

from __future__ import annotations

import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from hpceval.backends.slurm.client import CommandSlurmClient, SlurmError, format_starttime


class FakeRunner:
    """Stands in for subprocess.run: records commands and answers with canned results."""

    def __init__(self, stdout: str = "", stderr: str = "", returncode: int = 0) -> None:
        self.calls: list[list[str]] = []
        self.kwargs: list[dict[str, Any]] = []
        self.result = (stdout, stderr, returncode)
        self.raises: BaseException | None = None

    def __call__(self, command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append(command)
        self.kwargs.append(kwargs)
        if self.raises is not None:
            raise self.raises
        stdout, stderr, rc = self.result
        return subprocess.CompletedProcess(command, rc, stdout, stderr)


def test_submit_builds_command_and_parses_id(tmp_path: Path) -> None:
    runner = FakeRunner("57;local\n")
    client = CommandSlurmClient(runner=runner, bin_dir=Path("/opt/slurm/bin"))
    script = tmp_path / "job.sbatch"
    job_id = client.submit(script, extra_args=["-N", "2"], dependency="afterok:12")
    assert job_id == "57"
    assert runner.calls[0] == [
        "/opt/slurm/bin/sbatch",
        "--parsable",
        "-N",
        "2",
        "--dependency=afterok:12",
        str(script),
    ]
    kwargs = runner.kwargs[0]
    assert kwargs["env"]["SLURM_TIME_FORMAT"] == "standard"
    assert "shell" not in kwargs
    assert kwargs["stdin"] == subprocess.DEVNULL


def test_submit_failure_raises_with_command_and_stderr(tmp_path: Path) -> None:
    stderr = (
        "sbatch: error: Batch job submission failed: "
        "Requested node configuration is not available\n"
    )
    runner = FakeRunner(stderr=stderr, returncode=1)
    with pytest.raises(SlurmError) as info:
        CommandSlurmClient(runner=runner).submit(tmp_path / "x.sbatch")
    message = str(info.value)
    assert "sbatch --parsable" in message
    assert "exited 1" in message
    assert "node configuration is not available" in message
    assert info.value.returncode == 1


def test_submit_unreadable_output_is_a_slurm_error(tmp_path: Path) -> None:
    with pytest.raises(SlurmError, match="cannot read a job id"):
        CommandSlurmClient(runner=FakeRunner("Submitted batch job 5\n")).submit(tmp_path / "x")


def test_missing_binary_and_timeout_are_slurm_errors(tmp_path: Path) -> None:
    runner = FakeRunner()
    runner.raises = FileNotFoundError("sbatch")
    with pytest.raises(SlurmError, match="not found"):
        CommandSlurmClient(runner=runner).submit(tmp_path / "x")
    runner.raises = subprocess.TimeoutExpired(["sacct"], 5)
    with pytest.raises(SlurmError, match="timed out"):
        CommandSlurmClient(runner=runner, timeout_s=5).sacct(["1"])


def test_sacct_command_line_and_parsing() -> None:
    t = "2026-11-30T03:00:00"
    runner = FakeRunner(f"12_0|a|COMPLETED|0:0|None|{t}|{t}|00:00:01|node1|{t}|debug\n")
    client = CommandSlurmClient(runner=runner)
    records = client.sacct(["12_0", "12_1", "3"], starttime=datetime(2025, 1, 2, 3, 4, 5))
    command = runner.calls[0]
    assert command[:3] == ["sacct", "--parsable2", "--noheader"]
    assert "-X" in command
    assert command[command.index("-o") + 1].startswith("JobID,JobName,State,ExitCode,Reason")
    assert command[command.index("-j") + 1] == "3,12"  # array tasks asked for by base id
    assert command[command.index("-S") + 1] == "2025-01-02T03:04:05"
    assert records["12_0"].state == "COMPLETED"


def test_sacct_without_ids_runs_nothing() -> None:
    runner = FakeRunner()
    assert CommandSlurmClient(runner=runner).sacct([]) == {}
    assert runner.calls == []


def test_sacct_garbage_is_a_slurm_error() -> None:
    with pytest.raises(SlurmError, match="fields"):
        CommandSlurmClient(runner=FakeRunner("not|enough\n")).sacct(["1"])


def test_cancel_tolerates_already_finished_jobs() -> None:
    gone = "scancel: error: Kill job error on job id 5: Job/step already completing or completed\n"
    runner = FakeRunner(stderr=gone, returncode=1)
    CommandSlurmClient(runner=runner).cancel(["5"])
    assert runner.calls == [["scancel", "5"]]
    runner.result = ("", "scancel: error: Access/permission denied\n", 1)
    with pytest.raises(SlurmError, match="permission denied"):
        CommandSlurmClient(runner=runner).cancel(["5"])


def test_squeue_command_and_invalid_id() -> None:
    runner = FakeRunner("7_[1-2]|PENDING|JobArrayTaskLimit||1000\n7_0|RUNNING|None|node1|1000\n")
    entries = CommandSlurmClient(runner=runner).squeue(["7"])
    assert set(entries) == {"7_0", "7_1", "7_2"}
    assert "--array" in runner.calls[0] and runner.calls[0][-3].endswith("|%U|%k")
    assert entries["7_0"].user_id == 1000  # the owner, which kill checks before scancel
    invalid = "slurm_load_jobs error: Invalid job id specified\n"
    assert CommandSlurmClient(runner=FakeRunner(stderr=invalid, returncode=1)).squeue(["9"]) == {}


def test_format_starttime_converts_aware_times_to_local() -> None:
    naive = datetime(2026, 11, 30, 3, 0, 0)
    assert format_starttime(naive) == "2026-11-30T03:00:00"
    aware = naive.replace(tzinfo=timezone(timedelta(hours=2)))
    local = aware.astimezone().replace(tzinfo=None)
    assert format_starttime(aware) == local.strftime("%Y-%m-%dT%H:%M:%S")


def test_sacct_starttime_in_the_future_is_clamped_to_now() -> None:
    runner = FakeRunner("")
    future = datetime.now() + timedelta(hours=1)
    CommandSlurmClient(runner=runner).sacct(["1"], starttime=future)
    command = runner.calls[0]
    sent = datetime.fromisoformat(command[command.index("-S") + 1])
    assert sent <= datetime.now()
