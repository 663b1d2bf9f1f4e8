"""Progress counters and file; balancer choice (least outstanding, ties, down instances)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from hpceval.job.progress import Progress, write_atomic
from hpceval.job.proxy.balancer import Balancer


def test_snapshot_schema_and_rate_and_eta() -> None:
    progress = Progress(expected=100, window_s=30.0)
    progress.rate(now=0.0)
    progress.done, progress.cached, progress.failed, progress.in_flight = 40, 10, 10, 3
    progress.record_no_upstream("all 1 upstream instances are down: x")
    assert progress.rate(now=10.0) == 5.0
    snap = progress.snapshot(instances=[{"url": "u", "state": "up"}], cache={"entries": 1})
    assert snap["requests"] == {"done": 40, "cached": 10, "failed": 10, "in_flight": 3,
                                "expected": 100}
    assert snap["schema"] == 1 and snap["state"] == "running"
    assert snap["no_upstream"]["count"] == 1 and snap["no_upstream"]["last_reason"].startswith(
        "all 1")
    assert snap["instances"] == [{"url": "u", "state": "up"}] and snap["cache"] == {"entries": 1}
    assert snap["started"].endswith("Z") and snap["pid"] > 0
    # the window slides: only the last 30 s count
    progress.done = 100
    assert progress.rate(now=40.0) == (110 - 50) / 30.0


def test_busy_time_counts_only_while_a_request_is_in_flight() -> None:
    now = [100.0]
    progress = Progress(clock=lambda: now[0])
    assert progress.busy() == {"seconds": 0.0, "first_at": None, "idle_at": None}
    progress.in_flight += 1          # 100: busy
    now[0] = 101.0
    progress.in_flight += 1          # a second request changes nothing
    now[0] = 102.0
    progress.in_flight -= 1
    now[0] = 103.5
    progress.in_flight -= 1          # 103.5: idle after 3.5 s
    now[0] = 110.0                   # 6.5 s idle: not counted
    progress.in_flight += 1
    now[0] = 111.0
    # the open period counts up to now, in the snapshot as in busy()
    assert progress.snapshot()["busy"] == {"seconds": 4.5, "first_at": 100.0, "idle_at": 103.5}
    now[0] = 112.25
    progress.in_flight -= 1
    now[0] = 200.0
    assert progress.busy() == {"seconds": 5.75, "first_at": 100.0, "idle_at": 112.25}
    assert progress.in_flight == 0


def test_write_atomic_replaces_whole_file(tmp_path: Path) -> None:
    target = tmp_path / "progress.json"
    write_atomic(target, {"a": 1})
    write_atomic(target, {"a": 2}, durable=True)
    assert json.loads(target.read_text()) == {"a": 2}
    assert [p.name for p in tmp_path.iterdir()] == ["progress.json"]  # no temp file left


def test_write_atomic_from_two_threads_at_once(tmp_path: Path) -> None:
    # The proxy's periodic writer and its SIGUSR1 flush both write progress.json from worker
    # threads of one process: each write needs a temp file of its own.
    path = tmp_path / "progress.json"
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(400):
                write_atomic(path, {"writer": n, "i": i, "pad": "x" * 4096})
        except BaseException as exc:  # the test reports whatever a write raised
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert json.loads(path.read_text())["i"] == 399
    assert sorted(p.name for p in tmp_path.iterdir()) == ["progress.json"]


def test_instance_urls_are_server_base_urls() -> None:
    balancer = Balancer(["http://a:8000/", "http://b:8000/v1", "http://c:8000/v1/"])
    assert [i.url for i in balancer.instances] == [
        "http://a:8000", "http://b:8000", "http://c:8000"]


def test_least_outstanding_with_rotating_ties_and_down_skipped() -> None:
    # external: the only kind that comes back once down (a job's own server never does)
    balancer = Balancer(["http://a", "http://b", "http://c"], external=True)
    a, b, c = balancer.instances
    picks = [balancer.pick() for _ in range(3)]
    assert sorted(i.url for i in picks if i) == ["http://a", "http://b", "http://c"]
    balancer.release(a, ok=True)  # a now has the fewest outstanding
    assert balancer.pick() is a
    balancer.release(b, ok=True)
    balancer.release(c, ok=True)
    balancer.mark_down(b, "refused")
    balancer.mark_down(c, "refused")
    assert balancer.pick() is a and a.outstanding == 2  # busy, but the only one up
    balancer.mark_down(a, "refused")
    assert balancer.pick() is None and not balancer.any_up()
    assert balancer.down_reason().startswith("all 3 upstream instances are down: http://a (")
    balancer.mark_up(b)
    assert balancer.pick() is b and b.down_since is None
    assert [s["state"] for s in balancer.snapshot()] == ["down", "up", "down"]
