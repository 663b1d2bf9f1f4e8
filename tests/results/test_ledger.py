"""Each job's time ledger (results.ledger): phases from the job script's marks, the tail from
the tasks' manifests, GPU-seconds, and a ledger file that is damaged or not the user's."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support.runs import ledger_marks as marks

from hpceval.results.ledger import (
    BUSY,
    PHASES,
    SPLIT_JOBS,
    append_mark,
    job_ledger,
    ledger_line,
    parse_marks,
    read_ledger,
    sum_ledgers,
)
from hpceval.results.ledger_view import totals_line

T0 = 1_765_000_000.0  # ledger_marks' default t0


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


def test_a_task_record_others_may_write_moves_no_tail(tmp_path: Path) -> None:
    (tmp_path / "ledger").write_text(marks(*FULL))
    _task(tmp_path, "a", "42", T0 + 100)
    _task(tmp_path, "b", "42", T0 + 140)
    _task(tmp_path, "c", "42", T0 + 160)
    os.chmod(tmp_path / "tasks" / "c" / "manifest.json", 0o666)  # anyone's to rewrite
    (tmp_path / "tasks" / "d").mkdir()
    os.symlink(tmp_path / "tasks" / "c" / "manifest.json",
               tmp_path / "tasks" / "d" / "manifest.json")
    (job,), why = read_ledger(tmp_path)
    assert why is None and job.tail_s == 40.0  # b after a: c and d are not read


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


def test_a_running_job_is_in_its_last_phase_and_an_ended_one_in_none() -> None:
    (found,) = parse_marks(marks((0, "start"), (3, "launched"), (50, "ready"))).items()
    assert job_ledger(*found, now=T0 + 60).phase == "tasks"
    (found,) = parse_marks(marks(*FULL)).items()
    assert job_ledger(*found).phase is None


def test_without_details_only_the_ledger_is_read(tmp_path: Path) -> None:
    (tmp_path / "ledger").write_text(marks(*FULL))
    _task(tmp_path, "a", "42", T0 + 100)
    _task(tmp_path, "b", "42", T0 + 160)
    (job,), why = read_ledger(tmp_path, details=False)
    assert why is None and job.tail_s is None and job.seconds["tasks"] == 120.0


def test_sums_add_gpu_seconds_per_phase_over_jobs_and_models() -> None:
    (first,) = parse_marks(marks(*FULL)).items()
    full = job_ledger(*first, task_ends=[T0 + 100, T0 + 160])  # 4 GPUs, the tail 60 s
    (second,) = parse_marks(marks((0, "start"), (10, "launched"), (70, "ready"), job="43",
                                  gpus="2")).items()
    running = job_ledger(*second, now=T0 + 100)
    (third,) = parse_marks(marks((0, "start"), (5, "ready"), (25, "end"), job="7",
                                 gpus="")).items()
    unsaid = job_ledger(*third)
    assert unsaid.gpus is None
    total = sum_ledgers([([full, running], None), ([unsaid], None), ([], "ledger is owned by x")])
    assert total["seconds"] == {"setup": 18.0, "load": 107.0, "tasks": 170.0, "teardown": 10.0}
    assert total["gpu_seconds"] == {"setup": 32.0, "load": 308.0, "tasks": 540.0,
                                    "teardown": 40.0}
    assert (total["tail_s"], total["tail_gpu_seconds"], total["gpu_hours"]) == (60.0, 240.0,
                                                                               0.256)
    assert {k: total[k] for k in ("jobs", "running", "no_gpus", "models", "unknown")} == {
        "jobs": 3, "running": 1, "no_gpus": 1, "models": 2, "unknown": 1}
    assert totals_line(total) == (
        "of 0.26 GPU-hours: 0.01 setup, 0.09 load, 0.15 tasks (0.07 last task alone), 0.01 "
        "teardown; 3 job(s) of 2 model(s), 1 without an end mark (counted until now); 1 "
        "job(s) did not say their GPUs (not counted); 1 model(s)' ledger unknown")
    assert sum_ledgers([]) == {**dict.fromkeys(
        ("models", "unknown", "jobs", "judge_jobs", "running", "no_gpus"), 0),
        "seconds": dict.fromkeys(PHASES, 0.0), "gpu_seconds": dict.fromkeys(PHASES, 0.0),
        "tail_s": 0.0, "tail_gpu_seconds": 0.0, "idle_s": 0.0, "idle_gpu_seconds": 0.0,
        "gpu_hours": 0.0}


def test_the_servers_idle_time_is_the_tasks_phase_less_the_proxy_s_busy_seconds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ledger").write_text(marks(*FULL[:-1]))  # the proxy stops before the end
    monkeypatch.setenv("HPCEVAL_JOB_ID", "42")
    append_mark(tmp_path, BUSY, "90.0")
    with (tmp_path / "ledger").open("a") as ledger:
        ledger.write(marks((180, "end")))
    (job,), why = read_ledger(tmp_path)
    assert why is None and job.idle_s == 30.0 and job.to_json()["idle_s"] == 30.0
    assert "tasks 120 s (servers idle 30 s)" in ledger_line(job)
    total = sum_ledgers([([job], None)])
    assert (total["idle_s"], total["idle_gpu_seconds"]) == (30.0, 120.0)
    assert "0.13 tasks (0.03 servers idle)" in totals_line(total)
    # none recorded (no proxy, or killed before its stop), or not a number: unknown, not 0
    for value in ("", " x", " nan", " -1"):
        text = marks(*FULL).replace(" tasks_done", f" busy{value}\n42 {T0 + 170} tasks_done")
        (found,) = parse_marks(text).items()
        assert job_ledger(*found).idle_s is None, value
    # busier than the phase (requests in flight into the teardown): idle 0
    (found,) = parse_marks(marks(*FULL) + f"42 {T0 + 175} busy 500\n").items()
    assert job_ledger(*found).idle_s == 0.0


def test_the_proxy_marks_only_a_ledger_its_job_began(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HPCEVAL_JOB_ID", raising=False)
    append_mark(tmp_path, BUSY, "1.0")  # a judge's folder: no ledger, none made
    assert not (tmp_path / "ledger").exists()
    target = tmp_path / "elsewhere"
    target.write_text("")
    (tmp_path / "ledger").symlink_to(target)
    append_mark(tmp_path, BUSY, "1.0")
    assert target.read_text() == ""
    (tmp_path / "ledger").unlink()
    (tmp_path / "ledger").write_text("")
    append_mark(tmp_path, BUSY, "2.5")  # a local run's job is "local", as `mark` writes it
    assert (tmp_path / "ledger").read_text().split()[::2] == ["local", "busy"]


def test_the_line_of_a_large_sweep_and_of_jobs_without_gpus() -> None:
    hour = 3600.0
    total = {"jobs": 40, "models": 20, "running": 0, "no_gpus": 0, "unknown": 0,
             "gpu_seconds": {"setup": 1.1 * hour, "load": 3.0 * hour, "tasks": 8.0 * hour,
                             "teardown": 0.3 * hour}, "tail_gpu_seconds": 0.5 * hour,
             "seconds": dict.fromkeys(PHASES, 0.0), "tail_s": 0.0}
    assert totals_line(total) == ("of 12.4 GPU-hours: 1.1 setup, 3.0 load, 8.0 tasks (0.5 last "
                                  "task alone), 0.3 teardown; 40 job(s) of 20 model(s)")
    (found,) = parse_marks(marks((0, "start"), (360, "ready"), (720, "end"), gpus="0")).items()
    cpu = sum_ledgers([([job_ledger(*found)], None)])
    assert totals_line(cpu).startswith("of 0.20 hours (no GPU-hours): 0.10 setup, 0.00 load, "
                                       "0.10 tasks, 0.00 teardown; 1 job(s) of 1 model(s)")
    assert totals_line(sum_ledgers([([], "ledger is a symbolic link")])) == \
        "no ledger (1 unknown)"


def test_the_load_is_split_for_the_newest_jobs_only(tmp_path: Path) -> None:
    """The server's log is read once per job split: a file of many jobs costs SPLIT_JOBS."""
    (tmp_path / "server").mkdir()
    (tmp_path / "server" / "instance-0.log").write_text(
        "INFO Model loading took 0.25 GiB memory and 12.500000 seconds\n")
    (tmp_path / "ledger").write_text("".join(
        marks((10 * i, "start"), (10 * i + 1, "launched"), (10 * i + 5, "end"),
              job=str(100 + i)).replace(" launched\n", f" launched vllm\n{100 + i} "
                                                        f"{T0 + 10 * i + 1:.3f} log_from 0\n")
        for i in range(SPLIT_JOBS + 4)))
    jobs, _ = read_ledger(tmp_path)
    assert [bool(j.load_steps) for j in jobs] == [False] * 4 + [True] * SPLIT_JOBS
