"""Merging a cache directory's shards into one after a job: `python -m hpceval.job compact-cache`.

Each proxy process leaves one shard, so a run that was requeued many times, or an array of
model jobs sharing nothing but retries, would otherwise load ever more files. The job's
teardown runs this after its own proxy has stopped. The rules that make it safe on NFS while
another job of the same run may be starting or running:

- It does nothing while any other process holds a live lease (`live-*`, see `cache.py`): a shard
  being appended must not be merged, and on NFS a shard deleted under a reader on another node
  fails its reads (ESTALE). A lease is live if its process runs (same host), else if its job
  may still run processes (asked of the run's backend, `Backend.job_runs`: `--backend`), else
  if it was touched within `LEASE_STALE_S`; the others are leftovers of killed proxies, and
  removed.
- A shard is deleted only after a file holding every valid line of it was fsync'd and renamed
  into place, so a crash at any point leaves each answer readable (at worst twice, which the
  loader tolerates). If a lease appeared while merging, the inputs are kept as well.
- Two compactions at once each write their own merged file; neither deletes the other's.

Torn and corrupted lines are dropped, and so are answers a hit would refuse to replay
(`cache.usable_answer`: written before answers were checked at store time); of several lines
with one key, the first is kept.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hpceval.job.cache import (
    LEASE_GLOB,
    LEASE_STALE_S,
    SHARD_GLOB,
    line_body,
    line_key,
    parse_answer,
    read_line,
    shard_lines,
    stamp,
    usable_answer,
)
from hpceval.job.cache_index import DigestMap
from hpceval.storage import fsync_dir

log = logging.getLogger(__name__)

_OFF_BITS = 48
# the id of the job a lease names (JobEnv.job_id) -> whether that job may still run processes
# (Backend.job_runs of the run's backend); None when the scheduler cannot tell
JobRuns = Callable[[str], "bool | None"]


def _lease_is_live(lease: Path, now: float, stale_after: float,
                   job_runs: JobRuns | None) -> bool:
    """Whether the lease's process may still use the cache. Exact for a process on this host
    (is it running?) and for one in a job that has ended (a killed proxy never removes
    its lease: the successor's teardown must not wait 10 minutes for it); else by age."""
    try:
        mtime = lease.stat().st_mtime
    except FileNotFoundError:
        return False
    except OSError:
        return True  # cannot tell: keep away
    try:
        owner = json.loads(lease.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # half-written or just removed: judge by age alone
        owner = None
    if not isinstance(owner, dict):
        return now - mtime < stale_after
    pid, job = owner.get("pid"), owner.get("job")
    if owner.get("host") == socket.gethostname() and isinstance(pid, int) and pid > 0:
        try:
            os.kill(pid, 0)  # signal 0: only asks whether the process exists
        except ProcessLookupError:
            return False
        except OSError:
            return True  # another user's process
        return True
    if isinstance(job, str) and job and job_runs is not None:
        runs = job_runs(job)
        if runs is not None:
            return runs
    return now - mtime < stale_after


def live_leases(cache_dir: Path, stale_after: float = LEASE_STALE_S,
                remove_stale: bool = False, job_runs: JobRuns | None = None) -> list[str]:
    """Names of the leases of processes that may still use the directory."""
    now, live = time.time(), []
    for lease in sorted(cache_dir.glob(LEASE_GLOB)):
        if _lease_is_live(lease, now, stale_after, job_runs):
            live.append(lease.name)
        elif remove_stale:
            lease.unlink(missing_ok=True)
    return live


def compact(cache_dir: Path, stale_after: float = LEASE_STALE_S,
            job_runs: JobRuns | None = None) -> dict[str, Any]:
    """Merge every shard of `cache_dir` into one; see the module doc for when it declines."""
    live = live_leases(cache_dir, stale_after, remove_stale=True, job_runs=job_runs)
    if live:
        return {"skipped": f"in use by {len(live)} other process(es): {', '.join(live)}"}
    _remove_stale_temps(cache_dir, stale_after)
    shards = sorted(cache_dir.glob(SHARD_GLOB))
    if len(shards) < 2:
        return {"skipped": f"{len(shards)} shard(s): nothing to merge"}
    name = stamp()
    tmp = cache_dir / f".compact-{name}.tmp"
    target = cache_dir / f"shard-compacted-{name}.jsonl"
    entries, dropped, fds = 0, 0, []
    seen = DigestMap()  # key -> input shard number << 48 | offset: bounded memory, exact
    try:
        with tmp.open("wb") as out:
            for no, shard in enumerate(shards):
                fds.append(os.open(shard, os.O_RDONLY))
                for offset, line in shard_lines(shard):
                    key = line_key(line)
                    body = line_body(line) if key is not None else None
                    if key is None or body is None \
                            or not usable_answer(None, parse_answer(body)):
                        dropped += 1  # torn, corrupted, or an answer never to be replayed
                    elif not _already_kept(seen, fds, key):
                        seen.add(key, no << _OFF_BITS | offset)
                        out.write(line)
                        entries += 1
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:  # the inputs are untouched: only the partial merge goes
        tmp.unlink(missing_ok=True)
        raise
    finally:
        for fd in fds:
            os.close(fd)
    fsync_dir(cache_dir)
    result: dict[str, Any] = {"path": str(target), "entries": entries,
                              "shards_merged": len(shards), "dropped_lines": dropped}
    late = live_leases(cache_dir, stale_after, job_runs=job_runs)
    if late:  # a proxy started meanwhile and may have opened the inputs: keep them this time
        result["inputs_kept"] = f"in use by {', '.join(late)}"
        return result
    for shard in shards:
        shard.unlink(missing_ok=True)  # missing: a concurrent compaction merged it as well
    return result


def _already_kept(seen: DigestMap, fds: list[int], key: bytes) -> bool:
    for loc in seen.candidates(key):  # confirm the full key: the map keeps 64 bits of it
        if line_key(read_line(fds[loc >> _OFF_BITS], loc & ((1 << _OFF_BITS) - 1))) == key:
            return True
    return False


def _remove_stale_temps(cache_dir: Path, stale_after: float) -> None:
    """Temp files of compactions killed mid-way (a running one's file is young)."""
    now = time.time()
    for tmp in cache_dir.glob(".compact-*.tmp"):
        try:
            if now - tmp.stat().st_mtime > stale_after:
                tmp.unlink()
        except FileNotFoundError:
            pass


def _job_runs(kind: str | None) -> JobRuns | None:
    if kind is None:
        return None
    from hpceval.backends import backend_for

    return backend_for(kind).job_runs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hpceval.job compact-cache",
        description="Merge a response cache directory's shards into one (run after the job's "
                    "proxy stopped; declines while another proxy uses the directory).")
    parser.add_argument("cache_dir", type=Path, help="the cache directory ($MODEL_DIR/cache)")
    parser.add_argument("--backend", help="the run's execution type: its scheduler is asked "
                        "whether a lease's job still runs (without it, leases age out)")
    args = parser.parse_args(argv)
    if not args.cache_dir.is_dir():
        print(f"compact-cache: {args.cache_dir}: no such directory (nothing cached)")
        return 0
    started = time.monotonic()
    try:
        result = compact(args.cache_dir, job_runs=_job_runs(args.backend))
    except OSError as exc:  # the shards are untouched unless the merged file is in place
        print(f"compact-cache: {args.cache_dir}: {exc}", file=sys.stderr)
        return 1
    result["seconds"] = round(time.monotonic() - started, 3)
    print("compact-cache: " + json.dumps(result, sort_keys=True))
    return 0
