"""Each job's time ledger (results.ledger): phases from the job script's marks, the tail from
the tasks' manifests, GPU-seconds, and a ledger file that is damaged or not the user's."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hpceval.results.ledger import job_ledger, ledger_line, parse_marks, read_ledger

T0 = 1_765_000_000.0


def marks(*rows: tuple[float, str], job: str = "42", gpus: str = "4") -> str:
    lines = []
    for offset, name in rows:
        value = f" {gpus}" if name == "start" else ""
        lines.append(f"{job} {T0 + offset:.3f} {name}{value}")
    return "\n".join(lines) + "\n"


FULL = ((0, "start"), (3, "launched"), (50, "ready"), (170, "tasks_done"), (171, "teardown"),
        (180, "end"))


def test_phases_sum_to_the_jobs_time_and_gpu_seconds_follow() -> None:
    (found,) = parse_marks(marks(*FULL)).items()
    job = job_ledger(*found, submitted_at=T0 - 30)
    assert dict(job.seconds) == {"setup": 3.0, "load": 47.0, "tasks": 120.0, "teardown": 10.0}
    assert job.total_s == 180.0 and job.ended and job.gpus == 4 and job.queued_s == 30.0
    assert job.gpu_seconds() == {"setup": 12.0, "load": 188.0, "tasks": 480.0,
                                 "teardown": 40.0}
    assert ledger_line(job) == (
        "job 42: 180 s on 4 GPU(s): setup 3 s, load 47 s, tasks 120 s, teardown 10 s; "
        "0.20 GPU-hours, 0.07 of them before or after the tasks; queued 30 s before")


def test_a_cancelled_job_goes_from_its_phase_to_teardown_and_a_running_one_until_now() -> None:
    (found,) = parse_marks(marks((0, "start"), (3, "launched"), (20, "teardown"),
                                 (25, "end"))).items()
    job = job_ledger(*found)
    assert dict(job.seconds) == {"setup": 3.0, "load": 17.0, "tasks": 0.0, "teardown": 5.0}
    (found,) = parse_marks(marks((0, "start"), (3, "launched"), (50, "ready"))).items()
    running = job_ledger(*found, now=T0 + 60)
    assert running.seconds["tasks"] == 10.0 and not running.ended
    assert "no end mark" in ledger_line(running)


def test_a_rerun_under_the_same_id_counts_from_its_last_start() -> None:
    text = marks((0, "start"), (3, "launched")) + marks((100, "start"), (101, "ready"),
                                                       (110, "tasks_done"), (111, "end"))
    (job_id, found), = parse_marks(text).items()
    job = job_ledger(job_id, found)
    assert job.started_at == T0 + 100 and job.total_s == 11.0 and job.seconds["load"] == 0


@pytest.mark.parametrize("line", [
    "42 nan start 4", "42 -5 start 4", "42 notanumber ready", "42 1765000000 hack", "",
    "x" * 100 + " 1765000000 start 4", "42 1765000000 start 4 extra words here",
    "42 1765000001 start 99999999999",
])
def test_hostile_lines_are_skipped_or_unknown(line: str) -> None:
    found = parse_marks(line + "\n" + marks((5, "ready"), (6, "end"), job="7"))
    assert "7" not in found  # marks before a start are not a job's
    for job_id, job_marks in found.items():
        assert job_ledger(job_id, job_marks, now=T0).gpus is None


def _task(model: Path, name: str, job: str, end: float) -> None:
    from datetime import datetime, timezone

    folder = model / "tasks" / name
    folder.mkdir(parents=True)
    when = datetime.fromtimestamp(end, tz=timezone.utc).isoformat()
    (folder / "manifest.json").write_text(json.dumps(
        {"finished_at": when, "slurm": {"job_id": job}}))


def test_the_tail_is_the_last_task_alone(tmp_path: Path) -> None:
    (tmp_path / "ledger").write_text(marks(*FULL))
    _task(tmp_path, "a", "42", T0 + 100)
    _task(tmp_path, "b", "42", T0 + 160)
    _task(tmp_path, "c", "41", T0 + 165)  # another job's
    (job,), why = read_ledger(tmp_path)
    assert why is None and job.tail_s == 60.0
    assert "tasks 120 s (last task alone 60 s)" in ledger_line(job)


def test_a_ledger_that_is_not_the_users_is_not_read(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ledger"
    path.write_text(marks(*FULL))
    uid = path.stat().st_uid
    monkeypatch.setattr("hpceval.trust.my_uids", lambda: frozenset({uid + 1}))
    jobs, why = read_ledger(tmp_path)
    assert jobs == [] and why is not None and why.startswith("ledger is owned by")


def test_a_link_a_huge_file_and_none(tmp_path: Path) -> None:
    assert read_ledger(tmp_path) == ([], None)
    (tmp_path / "elsewhere").write_text(marks(*FULL))
    os.symlink(tmp_path / "elsewhere", tmp_path / "ledger")
    assert read_ledger(tmp_path) == ([], "ledger is a symbolic link")
    (tmp_path / "ledger").unlink()
    (tmp_path / "ledger").write_text(marks(*FULL) * 20_000)
    jobs, why = read_ledger(tmp_path)
    assert jobs == [] and why is not None and "larger than" in why


def test_the_load_is_split_as_the_engine_reported_it_in_this_jobs_part_of_its_log(
        tmp_path: Path) -> None:
    earlier = ("INFO Model loading took 0.25 GiB memory and 99.000000 seconds\n"
               "INFO torch.compile took 77.00 s in total\n")
    ours = ("INFO Model loading took 0.25 GiB memory and 12.500000 seconds\n"
            "INFO [backbone] torch.compile took 30.25 s in total\n"
            "INFO Graph capturing finished in 4 secs, took 0.10 GiB\n")
    (tmp_path / "server").mkdir()
    (tmp_path / "server" / "instance-0.log").write_text(earlier + ours)
    (tmp_path / "ledger").write_text(
        marks((0, "start"), (1, "launched"), (2, "ready"), (3, "end")).replace(
            " launched\n", f" launched vllm\n42 {T0 + 1:.3f} log_from {len(earlier)}\n"))
    (job,), _ = read_ledger(tmp_path)
    assert dict(job.load_steps) == {"weights": 12.5, "compile": 30.25, "graph capture": 4.0}
    assert "load 1 s (weights 12 s, compile 30 s, graph capture 4 s)" in ledger_line(job)
    # an engine that reports nothing, or a log that is not the user's: no split
    (tmp_path / "ledger").write_text(marks((0, "start"), (1, "launched"), (3, "end")).replace(
        " launched\n", " launched command\n"))
    (job,), _ = read_ledger(tmp_path)
    assert job.load_steps == {}
