"""The shared poller, against support.slurm.RecordedSlurm: recorded sacct output, every call
counted."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from support.slurm import RecordedSlurm

from hpceval.backends.slurm.poller import SacctPoller
from hpceval.backends.slurm.states import Phase

DATA = Path(__file__).parent / "data"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def row(job_id: str, state: str, exit_code: str = "0:0") -> str:
    t = "2026-11-30T03:00:00"
    return f"{job_id}|j|{state}|{exit_code}|None|{t}|{t}|00:00:01|node1|{t}|debug\n"


def test_fifty_jobs_one_sacct_call() -> None:
    client = RecordedSlurm(text="".join(row(str(i), "RUNNING") for i in range(100, 150)))
    poller = SacctPoller(client)
    for i in range(100, 150):
        poller.register(str(i))
    statuses = poller.refresh()
    assert len(client.sacct_calls) == 1
    assert poller.sacct_calls == 1
    assert sorted(client.sacct_calls[0]) == sorted(str(i) for i in range(100, 150))
    assert len(statuses) == 50
    assert all(s.phase is Phase.RUNNING for s in statuses.values())


def test_refresh_is_rate_limited_and_force_bypasses() -> None:
    clock = FakeClock()
    client = RecordedSlurm(text=row("1", "RUNNING"))
    poller = SacctPoller(client, min_interval_s=2.0, clock=clock)
    poller.register("1")
    poller.refresh()
    clock.now += 1.0
    poller.refresh()  # too soon: served from cache
    assert len(client.sacct_calls) == 1
    poller.refresh(force=True)
    assert len(client.sacct_calls) == 2
    clock.now += 2.5
    poller.refresh()
    assert len(client.sacct_calls) == 3


def test_missing_jobs_are_unknown_and_finished_jobs_leave_the_query() -> None:
    client = RecordedSlurm(text=row("1", "COMPLETED"))
    poller = SacctPoller(client)
    poller.register("1")
    poller.register("2")  # not in sacct yet (lag)
    statuses = poller.refresh(force=True)
    assert statuses["1"].phase is Phase.DONE
    assert statuses["2"].phase is Phase.UNKNOWN
    client.text = row("1", "COMPLETED") + row("2", "FAILED", "3:0")
    poller.refresh(force=True)
    assert client.sacct_calls[-1] == ["2"]  # job 1 is done: not asked about again
    assert poller.status("2").reason == "exit code 3"
    assert poller.record("2") is not None
    poller.refresh(force=True)
    assert len(client.sacct_calls) == 2  # nothing unfinished: no call at all


def test_array_tasks_queried_by_base_id_and_expanded() -> None:
    client = RecordedSlurm(text=(DATA / "sacct-22.05-early.txt").read_text())
    poller = SacctPoller(client)
    tasks = poller.register_array("105", range(6))
    poller.register("103")
    statuses = poller.refresh()
    assert len(client.sacct_calls) == 1
    assert client.sacct_calls[0] == [*tasks, "103"]
    assert [statuses[t].phase for t in tasks] == [Phase.RUNNING] * 2 + [Phase.QUEUED] * 4
    assert statuses["103"].phase is Phase.FAILED


def test_array_base_id_combines_tasks() -> None:
    client = RecordedSlurm(text=(DATA / "sacct-22.05-later.txt").read_text())
    poller = SacctPoller(client)
    poller.register("105")
    assert poller.refresh()["105"].phase is Phase.QUEUED
    client.text = "".join(
        row(f"105_{t}", "FAILED" if t == 2 else "COMPLETED", "5:0" if t == 2 else "0:0")
        for t in range(6)
    )
    status = poller.refresh(force=True)["105"]
    assert (status.phase, status.reason) == (Phase.FAILED, "1/6 tasks failed: exit code 5")


def test_placeholder_rows_do_not_change_known_states() -> None:
    client = RecordedSlurm(text=row("102", "RUNNING"))
    poller = SacctPoller(client)
    poller.register("102")
    poller.register("110")
    poller.refresh()
    client.text = (DATA / "sacct-22.05-placeholders.txt").read_text()
    statuses = poller.refresh(force=True)
    assert statuses["102"].phase is Phase.RUNNING  # kept; the stand-in row said PENDING
    assert statuses["110"].phase is Phase.UNKNOWN


def test_running_then_pending_means_requeued() -> None:
    client = RecordedSlurm(text=row("119", "RUNNING"))
    poller = SacctPoller(client)
    poller.register("119")
    poller.refresh()
    client.text = (DATA / "sacct-22.05-requeue-duplicates.txt").read_text()
    status = poller.refresh(force=True)["119"]
    assert (status.phase, status.reason) == (Phase.RESUMING, "requeued; waiting to run again")
    client.text = row("119", "RUNNING")
    assert poller.refresh(force=True)["119"].phase is Phase.RUNNING


def test_unsplit_pending_array_row_covers_its_tasks() -> None:
    client = RecordedSlurm(text=row("9", "PENDING"))
    poller = SacctPoller(client)
    tasks = poller.register_array("9", range(3))
    assert {poller.refresh()[t].phase for t in tasks} == {Phase.QUEUED}


def test_starttime_filter_uses_earliest_submission_minus_slack() -> None:
    client = RecordedSlurm(text="")
    poller = SacctPoller(client, starttime_slack_s=60)
    t0 = datetime(2026, 11, 30, 3, 0, 0)
    poller.register("1", submitted_at=t0 + timedelta(minutes=5))
    poller.register("2", submitted_at=t0)
    poller.refresh()
    assert client.sacct_starttimes[-1] == t0 - timedelta(seconds=60)
    poller.register("3")  # age unknown: a filter could hide it
    poller.refresh(force=True)
    assert client.sacct_starttimes[-1] is None


def test_sacct_failure_keeps_last_states() -> None:
    client = RecordedSlurm(text=row("1", "RUNNING"))
    poller = SacctPoller(client)
    poller.register("1")
    poller.refresh()
    client.sacct_failures = 1
    assert poller.refresh(force=True)["1"].phase is Phase.RUNNING
    assert poller.consecutive_errors == 1
    assert poller.last_error is not None and "Connection refused" in str(poller.last_error)
    poller.refresh(force=True)
    assert poller.consecutive_errors == 0


def test_wait_polls_until_terminal_or_deadline() -> None:
    clock = FakeClock()
    client = RecordedSlurm(text=row("1", "RUNNING"))
    poller = SacctPoller(client, min_interval_s=2.0, clock=clock)
    poller.register("1")

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        if len(client.sacct_calls) >= 3:
            client.text = row("1", "COMPLETED")

    assert poller.wait(["1"], timeout_s=60, sleep=sleep)["1"].phase is Phase.DONE
    assert len(client.sacct_calls) == 4
    client.text = ""
    poller.register("2")
    assert poller.wait(["2"], timeout_s=5, sleep=clock.sleep)["2"].phase is Phase.UNKNOWN


def test_forget_and_unknown_ids() -> None:
    poller = SacctPoller(RecordedSlurm(text=""))
    poller.register("1")
    assert poller.job_ids == ["1"]
    poller.forget("1")
    assert poller.job_ids == []
    assert poller.status("404").phase is Phase.UNKNOWN


def test_registered_array_is_final_only_when_every_task_is() -> None:
    # sacct lags on array tasks: rows of tasks 0 and 1 arrive before tasks 2 and 3 are listed.
    client = RecordedSlurm(text=row("7_0", "COMPLETED") + row("7_1", "COMPLETED"))
    poller = SacctPoller(client)
    poller.register("7")  # replaced by the exact array registration below
    poller.register_array("7", range(4))
    assert sorted(poller.job_ids) == ["7", "7_0", "7_1", "7_2", "7_3"]
    assert poller.refresh()["7"].phase is Phase.UNKNOWN
    client.text += row("7_2", "FAILED", "3:0") + row("7_3", "COMPLETED")
    status = poller.refresh(force=True)["7"]
    assert (status.phase, status.reason) == (Phase.FAILED, "1/4 tasks failed: exit code 3")
    assert poller.wait(["7"], timeout_s=0)["7"].phase is Phase.FAILED
    poller.forget("7")
    assert poller.job_ids == []


def test_submitit_interface_answers_from_the_same_single_call() -> None:
    from submitit.slurm.slurm import SlurmInfoWatcher

    client = RecordedSlurm(text=row("300", "RUNNING") + row("301", "COMPLETED"))
    poller = SacctPoller(client)
    assert isinstance(poller, SlurmInfoWatcher)
    poller.register("300")
    poller.register("301")
    assert poller.get_state("300", mode="force") == "RUNNING"
    assert poller.get_state("301", mode="cache") == "COMPLETED"
    assert not poller.is_done("300", mode="cache") and poller.is_done("301", mode="cache")
    assert poller.num_calls == poller.sacct_calls == len(client.sacct_calls) == 1
    poller.refresh(force=True)  # the finished job leaves the query
    assert client.sacct_calls[-1] == ["300"]
