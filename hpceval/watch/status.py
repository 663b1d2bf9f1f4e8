"""`hpceval status WATCH`: checkpoints seen / evaluated / pending / failed, the tick job, and
each checkpoint's run, from ONE scheduler call (the runs' jobs, the tick and the training job
are asked together through the shared poller, as `hpceval status` does for runs).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from hpceval.backends import SchedulerClient
from hpceval.phases import JobStatus
from hpceval.records import RunFileError
from hpceval.runs.state import RunState, Tracker
from hpceval.watch import state as st
from hpceval.watch.spec import WatchError, read_spec

# what the summary counts: a checkpoint is in exactly one of these
SUMMARY = ("seen", "evaluated", "running", "pending", "failed")


def watch_status(watch_dir: Path, client: SchedulerClient | None = None) -> dict[str, Any]:
    spec = read_spec(watch_dir)
    out: dict[str, Any] = {"watch_id": spec.watch_id, "watch_dir": str(watch_dir),
                           "checkpoints_dir": spec.checkpoints, "after_job": spec.after_job,
                           "interval_s": spec.interval_s,
                           "mode": f"marker {spec.marker}" if spec.marker
                           else f"stable for {spec.grace_s} s"}
    try:
        state = st.load_state(watch_dir)
    except WatchError as exc:
        return {**out, "status": "error", "reason": str(exc), "checkpoints": [],
                "summary": {}, "tick": None, "training": None}
    tracker = Tracker(client, min_interval_s=2.0)
    entries = sorted(state.checkpoints.items(), key=lambda kv: (kv[1].step, kv[0]))
    for _, entry in entries:
        if entry.run_dir:
            # gone or damaged: its row says so; the other runs still show
            with contextlib.suppress(RunFileError, OSError, ValueError, KeyError, TypeError):
                tracker.add(Path(entry.run_dir))
    tick = state.ticks[-1] if state.ticks else None
    extra = ([(tick.id, tick.submitted_at)] if tick else []) + (
        [(spec.after_job, spec.created_at - 86400 * 30)] if spec.after_job else [])
    # the tick and the training job ride in the runs' call; asked alone only if no run had one
    backend = tracker.backend(spec.kind)
    backend.job_states(extra, ask=False)
    states = tracker.refresh(force=True)  # ONE scheduler call for the runs and the jobs above
    found = dict(zip([job_id for job_id, _ in extra], backend.job_states(extra), strict=True))
    runs = {str(s.ref.run_dir): s for s in states}
    rows = [_row(name, entry, runs.get(str(entry.run_dir))) for name, entry in entries]
    summary = {key: 0 for key in SUMMARY}
    for row in rows:
        summary["seen"] += 1
        summary[row["bucket"]] += 1
    as_json = state.to_json()  # status --json: the state's own words
    return {**out, "status": state.status, "reason": state.reason,
            "summary": summary, "checkpoints": rows, "ignored": as_json["ignored"],
            "foreign": as_json["foreign"], "max_per_tick": spec.max_per_tick,
            "last_tick": as_json["last_tick"],
            "tick": _job(found, tick.id) if tick else None,
            "training": _job(found, spec.after_job) if spec.after_job else None}


def _job(found: dict[str, JobStatus], job_id: str) -> dict[str, str]:
    status = found[job_id]
    return {"id": job_id, "state": status.phase.value, "reason": status.reason}


def _row(name: str, entry: st.CheckpointEntry, run: RunState | None) -> dict[str, Any]:
    status = entry.status
    row: dict[str, Any] = {"checkpoint": name, "step": entry.step, "status": status,
                           "run_id": entry.run_id, "run_state": None, "reason": entry.error}
    if run is not None:
        row["run_state"], row["reason"] = run.phase.value, run.reason
    elif status == st.SUBMITTED:
        row["reason"] = f"run directory {entry.run_dir} is missing or unreadable"
    if status in (st.PENDING, st.COMPLETE, st.CLAIMED) or (
            status == st.FAILED and entry.retryable):
        bucket = "pending"
    elif status == st.SUBMITTED and run is not None and run.phase.value == "done":
        bucket = "evaluated"
    elif status == st.SUBMITTED and run is not None and not run.phase.terminal:
        bucket = "running"
    else:
        bucket = "failed"
    row["bucket"] = bucket
    return row


def format_watch(data: dict[str, Any]) -> str:
    s = data["summary"]
    head = f"{data['watch_id']}  {data['status'].upper()}"
    if data.get("reason"):
        head += f"  ({data['reason']})"
    lines = [head, f"  checkpoints {data['checkpoints_dir']} ({data['mode']}), every "
                   f"{data['interval_s']} s: {data['watch_dir']}"]
    if s:
        lines.append("  " + ", ".join(f"{s[k]} {k}" for k in SUMMARY))
    if data.get("tick"):
        t = data["tick"]
        lines.append(f"  tick job {t['id']}: {t['state']}" + (f" ({t['reason']})"
                                                                if t["reason"] else ""))
    if data.get("training"):
        t = data["training"]
        lines.append(f"  training job {t['id']}: {t['state']}")
    last = data.get("last_tick")
    if last:
        ago = max(0.0, time.time() - float(last["at"]))
        lines.append(f"  last tick {ago:.0f} s ago (job {last.get('job') or '?'})")
    if data.get("ignored"):
        lines.append(f"  ignored (no step in the name): {', '.join(data['ignored'])}")
    for f in data.get("foreign") or []:
        lines.append(f"  ignored {f['name']}: owned by {f['owner_name']}, not by you "
                     "(--trust-owner trusts an owner)")
    width = max((len(r["checkpoint"]) for r in data["checkpoints"]), default=10)
    for r in data["checkpoints"]:
        run = f"run {r['run_id']} {r['run_state'] or '?'}" if r["run_id"] else ""
        detail = "  ".join(x for x in (run, r["reason"]) if x)
        lines.append(f"  {r['checkpoint']:<{width}}  step {r['step']:<8}  "
                     f"{r['bucket']:<9}  {detail}".rstrip())
    return "\n".join(lines) + "\n"
