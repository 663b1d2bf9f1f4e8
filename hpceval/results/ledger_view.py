"""The ledger (results.ledger) as every view shows it, beyond `info`'s line per job: its JSON
(info --json and each row of results --json), a running job's phase (`status`), the sums
over jobs and models in words (info, the report), and a sweep judge's jobs beside the models'
(info: its tasks phase is the time it served, and how long it waited for the array).

A ledger that is not read (not yours, a link, over 1 MiB) is ``{"unknown": why}`` in the JSON
and a line that says why in the texts; lines that are not marks were skipped when it was read
(results.ledger), so a damaged file shows less, never breaks a view.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpceval.contract import aux_dir, aux_folder
from hpceval.durations import span
from hpceval.results.columns import model_folder, with_column
from hpceval.results.ledger import PHASES, JobLedger, read_ledger, sum_ledgers

if TYPE_CHECKING:
    from hpceval.runs.jobs import Jobs

# The jobs a model's JSON lists (the newest; its total still counts every one): a real model
# has a few, a damaged or planted file could name thousands, and results --json repeats a
# model's ledger on each of its rows.
JOBS_LISTED = 50


def submitted_of(jobs: Jobs, index: int) -> dict[str, float]:
    """A model's job ids -> when each was submitted (jobs.json), for ``queued_s``. A sweep's
    element is listed as <array>_<n>: its job marks that id as ``element`` (results.ledger)."""
    return {e.scheduler_id(index): e.submitted_at for e in jobs.main_for(index)}


def ledger_json(jobs: Sequence[JobLedger], why: str | None, *, judge: bool = False
                ) -> dict[str, Any] | None:
    """A model's ledger (read_ledger's jobs and why unknown), or a sweep ``judge``'s, as the
    JSON views carry it: ``jobs`` (JobLedger.to_json, the newest JOBS_LISTED), ``left_out``
    (earlier jobs not listed), ``total`` (sum_ledgers of them all) and ``unknown`` None;
    {"unknown": why} for a ledger that was not read; None when there is none (no file, or no
    mark in it)."""
    if not jobs and why is None:
        return None
    if why is not None:
        return {"unknown": why}
    listed = list(jobs)[-JOBS_LISTED:]
    return {"jobs": [j.to_json() for j in listed], "left_out": len(jobs) - len(listed),
            "total": sum_ledgers([], [(jobs, None)]) if judge else sum_ledgers([(jobs, None)]),
            "unknown": None}


def _submitted(run_dir: str) -> dict[str, dict[str, float]]:
    """model key -> submitted_of, {} when run.json or jobs.json cannot be read (then the
    queue is unknown; the ledger itself is still shown)."""
    from hpceval.records import RunFileError, read_run
    from hpceval.runs.jobs import read_jobs

    try:
        manifest, jobs = read_run(Path(run_dir)), read_jobs(Path(run_dir))
    except (RunFileError, OSError, ValueError, KeyError, TypeError):
        return {}
    return {m.key: submitted_of(jobs, m.index) for m in manifest.models}


def with_ledger(frame: Any) -> Any:
    """The results frame plus a ``ledger`` column: on each row its model's ledger as
    ``ledger_json`` (None without one; {"unknown": why}), each model's ledger read once and
    each run's jobs.json once."""
    runs: dict[str, dict[str, dict[str, float]]] = {}

    def ledger_of(folder: str, run_dir: str) -> dict[str, Any] | None:
        if run_dir and run_dir not in runs:
            runs[run_dir] = _submitted(run_dir)
        submitted = runs.get(run_dir, {}).get(os.path.basename(folder))
        return ledger_json(*read_ledger(Path(folder), submitted=submitted))

    return with_column(frame, "ledger", ledger_of, key=model_folder)


def judge_ledgers(run_dir: Path, names: Sequence[str], jobs: Jobs,
                  models: Iterable[tuple[Sequence[JobLedger], str | None]]
                  ) -> dict[str, tuple[list[JobLedger], str | None]]:
    """A sweep's judges in their own jobs (their folder under auxiliary/, as status names
    them -> read_ledger's answer), each job with ``waited_s``: from ready until the first of
    the ``models``' jobs started while it ran. That is the order's cost (docs/judge-sweep.md):
    the judge runs first and its GPUs wait for the array to leave the queue."""
    starts = sorted(job.started_at for found, _why in models for job in found)
    out = {}
    for name in names:
        submitted = {e.id: e.submitted_at for e in jobs.chain if e.aux == name}
        found, why = read_ledger(aux_dir(run_dir, name), submitted=submitted)
        out[aux_folder(name)] = ([dataclasses.replace(job, waited_s=_waited(job, starts))
                                  for job in found], why)
    return out


def _waited(judge: JobLedger, starts: Sequence[float]) -> float | None:
    """From the judge job's ready (the end of its load) until the first start in ``starts``
    within its life; None when it never became ready."""
    if judge.seconds["tasks"] <= 0:
        return None
    ready = judge.started_at + judge.seconds["setup"] + judge.seconds["load"]
    first = next((when for when in starts
                  if judge.started_at <= when <= judge.started_at + judge.total_s), None)
    serving_until = ready + judge.seconds["tasks"]
    return max(0.0, min(first if first is not None else serving_until, serving_until) - ready)


def job_now(job: JobLedger) -> dict[str, Any]:
    """A running model's current job for `status --json`: its id, ``phase`` (None once it
    wrote its end), ``phase_s`` (how long it has been in it), ``load_s`` and ``total_s``."""
    return {"job_id": job.job_id, "phase": job.phase,
            "phase_s": round(job.seconds[job.phase], 1) if job.phase else None,
            "load_s": round(job.seconds["load"], 1), "total_s": round(job.total_s, 1)}


def now_text(now: Mapping[str, Any]) -> str:
    """'job 123: tasks for 4 min (load took 46 s)': job_now's dict, or why it is unknown."""
    if "unknown" in now:
        return f"ledger: unknown ({now['unknown']})"
    if now.get("phase") is None:
        return f"job {now['job_id']}: ended after {span(now['total_s'])}"
    text = f"job {now['job_id']}: {now['phase']} for {span(now['phase_s'])}"
    if now["phase"] in ("tasks", "teardown") and now.get("load_s"):
        text += f" (load took {span(now['load_s'])})"
    return text


def _decimals(hours: float) -> int:
    """One precision for a whole line: two significant digits of its total (12.4, 0.26,
    0.025), its parts at the same (they may be off by the last digit's rounding)."""
    return 1 if hours <= 0 else max(1, min(4, 1 - math.floor(math.log10(hours))))


def totals_line(total: Mapping[str, Any]) -> str:
    """'of 12.4 GPU-hours: 1.1 setup, 3.0 load, 8.0 tasks (0.5 last task alone, 0.3 servers
    idle), 0.3 teardown; 3 job(s) of 2 model(s)' (sum_ledgers' dict), then what it could not
    count."""
    if not total["jobs"]:
        return "no ledger" + (f" ({total['unknown']} unknown)" if total["unknown"] else "")
    values, tail, unit = total["gpu_seconds"], total["tail_gpu_seconds"], "GPU-hours"
    idle = total.get("idle_gpu_seconds", 0.0)
    if not sum(values.values()):  # no GPU held (a CPU job) or none said: the wall time
        values, tail, unit = total["seconds"], total["tail_s"], "hours (no GPU-hours)"
        idle = total.get("idle_s", 0.0)
    whole = sum(values.values()) / 3600
    places = _decimals(whole)
    parts = []
    within = [f"{tail / 3600:.{places}f} last task alone"] if tail else []
    if idle:
        within.append(f"{idle / 3600:.{places}f} servers idle")
    for name in PHASES:
        text = f"{values[name] / 3600:.{places}f} {name}"
        if name == "tasks" and within:
            text += f" ({', '.join(within)})"
        parts.append(text)
    judges = total.get("judge_jobs", 0)
    text = (f"of {whole:.{places}f} {unit}: " + ", ".join(parts)
            + f"; {total['jobs'] - judges} job(s) of {total['models']} model(s)"
            + (f" and {judges} judge job(s)" if judges else ""))
    if total["running"]:
        text += f", {total['running']} without an end mark (counted until now)"
    if total["no_gpus"] and unit == "GPU-hours":
        text += f"; {total['no_gpus']} job(s) did not say their GPUs (not counted)"
    if total["unknown"]:
        text += f"; {total['unknown']} model(s)' ledger unknown"
    return text
