"""Cache compaction after a job: merges, never deletes what a live proxy uses, never loses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_cache import CHAT, answer, body, fill

from hpceval.job import cache_compact
from hpceval.job.cache import LEASE_STALE_S, ResponseCache
from hpceval.job.cache_compact import compact


def lease(cache_dir: Path, host: str, pid: int, age_s: float = 0.0, job: str | None = None
          ) -> Path:
    path = cache_dir / f"live-{host}-{pid}-x"
    path.write_text(json.dumps({"host": host, "pid": pid, "job": job}))
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def test_declines_while_a_proxy_holds_the_cache_then_merges(tmp_path: Path) -> None:
    keys = fill(tmp_path, 3) + fill(tmp_path, 2, start=10)
    live = ResponseCache(tmp_path)  # a proxy of an overlapping job, in this process: alive
    result = compact(tmp_path)
    assert "skipped" in result and "live-" in result["skipped"]
    assert len(list(tmp_path.glob("shard-*.jsonl"))) == 2
    live.close()
    result = compact(tmp_path)
    assert result["entries"] == 5 and result["shards_merged"] == 2
    cache = ResponseCache(tmp_path)
    assert [cache.get(k) for k in keys] == [answer(n) for n in (0, 1, 2, 10, 11)]
    cache.close()


def test_leases_of_dead_processes_are_ignored_and_removed(tmp_path: Path) -> None:
    fill(tmp_path, 2)
    fill(tmp_path, 2, start=5)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    here = lease(tmp_path, os.uname().nodename, int(dead.stdout))  # same host, process gone
    elsewhere_old = lease(tmp_path, "other-node", 1, age_s=LEASE_STALE_S + 60)
    assert compact(tmp_path)["entries"] == 4
    assert not here.exists() and not elsewhere_old.exists()


def test_a_recent_lease_from_another_node_blocks(tmp_path: Path) -> None:
    fill(tmp_path, 1)
    fill(tmp_path, 1, start=3)
    lease(tmp_path, "other-node", 1, age_s=30)
    assert "skipped" in compact(tmp_path)
    assert len(list(tmp_path.glob("shard-*.jsonl"))) == 2


def test_a_lease_of_an_ended_slurm_job_is_dead_at_once(tmp_path: Path) -> None:
    """A proxy killed with its job (scancel) leaves its lease; the successor's teardown asks
    Slurm instead of waiting for the lease to age."""
    fill(tmp_path, 1)
    fill(tmp_path, 1, start=3)
    lease(tmp_path, "other-node", 1, age_s=5, job="4242")
    runs = {"4242": True}
    assert "skipped" in compact(tmp_path, job_runs=runs.get)
    assert "skipped" in compact(tmp_path, job_runs=lambda _job: None)  # Slurm silent: by age
    runs["4242"] = False  # ended (scancel)
    assert compact(tmp_path, job_runs=runs.get)["entries"] == 2
    assert not list(tmp_path.glob("live-*"))


def test_inputs_kept_when_a_proxy_starts_during_the_merge(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = fill(tmp_path, 2) + fill(tmp_path, 2, start=4)
    calls: list[int] = []
    real = cache_compact.live_leases

    def appearing(*args: object, **kwargs: object) -> list[str]:
        calls.append(1)
        return real(*args, **kwargs) if len(calls) == 1 else ["live-late-1-x"]  # type: ignore

    monkeypatch.setattr(cache_compact, "live_leases", appearing)
    result = compact(tmp_path)
    assert "inputs_kept" in result and len(list(tmp_path.glob("shard-*.jsonl"))) == 3
    cache = ResponseCache(tmp_path)  # every answer twice: the loader takes either
    assert [cache.get(k) for k in keys] == [answer(n) for n in (0, 1, 4, 5)]
    cache.close()


def test_crash_before_rename_loses_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                           ) -> None:
    keys = fill(tmp_path, 2) + fill(tmp_path, 2, start=4)

    def crash(*_args: object) -> None:
        raise OSError("node died")

    monkeypatch.setattr("hpceval.job.cache_compact.os.replace", crash)
    with pytest.raises(OSError):
        compact(tmp_path)
    assert not list(tmp_path.glob(".compact-*")) and len(list(tmp_path.glob("shard-*"))) == 2
    cache = ResponseCache(tmp_path)
    assert [cache.get(k) for k in keys] == [answer(n) for n in (0, 1, 4, 5)]
    cache.close()


def test_sampled_repeats_survive_compaction(tmp_path: Path) -> None:
    first = ResponseCache(tmp_path)
    sampled = [first.key_for(CHAT, body(temperature=0.7)) for _ in range(3)]
    for n, key in enumerate(sampled):
        first.put(key, CHAT, 200, answer(n))
    first.close()
    fill(tmp_path, 1, start=9)
    assert compact(tmp_path)["entries"] == 4
    resumed = ResponseCache(tmp_path)
    again = [resumed.key_for(CHAT, body(temperature=0.7)) for _ in range(3)]
    assert [resumed.get(k) for k in again] == [answer(n) for n in range(3)]
    resumed.close()


def test_cli_via_job_entry_point(tmp_path: Path) -> None:
    fill(tmp_path, 2)
    fill(tmp_path, 1, start=2)
    run = subprocess.run([sys.executable, "-m", "hpceval.job", "compact-cache", str(tmp_path)],
                         capture_output=True, text=True, check=True)
    report = json.loads(run.stdout.removeprefix("compact-cache: "))
    assert report["entries"] == 3 and report["shards_merged"] == 2
    missing = subprocess.run([sys.executable, "-m", "hpceval.job", "compact-cache",
                              str(tmp_path / "none")], capture_output=True, text=True)
    assert missing.returncode == 0 and "nothing cached" in missing.stdout
