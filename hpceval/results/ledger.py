"""Where each job's allocation went: its phases, from the marks the job script writes.

The job script (preamble.j2's ``mark``) appends ``<job id> <epoch seconds> <mark> [value]`` to
``models/<key>/ledger`` (contract.LEDGER_FILE) as it passes each mark. A mark begins a phase:

=============  ===========  ================================================================
mark           phase        what runs
=============  ===========  ================================================================
start (GPUs)   setup        site setup, ports, the model's lock, image checks
launched       load         the servers start: weights, compile, graph capture, health wait
ready          tasks        every server answers; the harnesses run (with overlap_load they
                            started during load: their start-up is load time here)
tasks_done     teardown     the tasks have ended: stopping servers, compacting the cache
teardown       teardown     the EXIT trap (a cancel or the walltime comes here directly)
end            (the end)    the job's last line
=============  ===========  ================================================================

A phase lasts from its first mark to the next phase's; a phase without its mark takes no time
(a job without servers has no load). A rerun under the same id (a requeue) starts again at its
last ``start``. Without an ``end`` the job still runs (its last phase lasts until now) or was
killed past the scheduler's grace. ``queued`` is from its submission (jobs.json) to ``start``,
and holds no GPU. Within ``tasks``, ``tail`` is the time the last task ran alone: its end after
the end of the one before (the tasks' manifests of this job), and ``idle`` the time the model's
servers had no request in flight: ``tasks`` less the ``busy`` seconds the in-job proxy counted
and appended when it stopped (``append_mark``; requests it held while the model loaded are not
in flight). GPU-seconds are a phase's seconds times the GPUs the job holds (the header's
request, written with ``start``).

The file is read once through one descriptor, only if it is the user's (trust.read_own_file),
at most READ_LIMIT bytes; malformed lines are skipped, so a damaged or planted ledger shows
less, never breaks a view. ``sum_ledgers`` adds the jobs of models up by phase; how each view
shows them (status, results --json, the report) is results.ledger_view's and report.ledger's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from hpceval.contract import (
    FAILED_FILE,
    FIRST_SERVER_LOG,
    LEDGER_FILE,
    MANIFEST_FILE,
    SERVER_DIR,
    TASKS_DIR,
)
from hpceval.results.runtime_view import read_json_once
from hpceval.trust import Unread, read_own_file, stat_problem

READ_LIMIT = 1 << 20  # a job writes about 300 bytes
PHASE_OF = {"start": "setup", "launched": "load", "ready": "tasks", "tasks_done": "teardown",
            "teardown": "teardown", "end": ""}
PHASES = ("setup", "load", "tasks", "teardown")
# not phases: where this job's lines of the model's head server log begin (its load report);
# the seconds its servers had a request in flight (the proxy's, at its stop); a sweep element's
# id as jobs.json holds it (<array>_<index>: the job writes its own id on each line)
LOG_FROM, BUSY, ELEMENT = "log_from", "busy", "element"
VALUES = (LOG_FROM, BUSY, ELEMENT)
MAX_GPUS = 1 << 20
RECORD_LIMIT = 1 << 20  # a task's manifest.json: a few KiB
LOG_READ = 1 << 20  # of the server's log from there: its start-up report is in the first KiBs
SPLIT_JOBS = 16  # the newest jobs whose load is split (one read of the server's log each)


@dataclass(frozen=True)
class JobLedger:
    job_id: str
    started_at: float
    gpus: int | None  # as the job wrote it; None when unknown
    seconds: Mapping[str, float]  # PHASES -> seconds
    ended: bool  # it wrote its end mark
    queued_s: float | None = None
    tail_s: float | None = None  # within tasks: the last task alone
    notes: tuple[str, ...] = field(default=())
    # within load, what the engine reported: step -> seconds (Engine.load_steps)
    load_steps: Mapping[str, float] = field(default_factory=dict)
    phase: str | None = None  # the phase it is in (its last begun); None once it ended
    idle_s: float | None = None  # within tasks: no request in flight (None: not recorded)
    # a sweep's judge: from ready until the first model's job started (part of tasks; its
    # whole tasks phase when none started while it ran); None for a model's job
    waited_s: float | None = None

    @property
    def total_s(self) -> float:
        return sum(self.seconds.values())

    def gpu_seconds(self) -> dict[str, float] | None:
        if self.gpus is None:
            return None
        return {name: round(s * self.gpus, 1) for name, s in self.seconds.items()}

    def to_json(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "started_at": self.started_at, "gpus": self.gpus,
                "ended": self.ended, "queued_s": _round(self.queued_s),
                "seconds": {k: round(v, 1) for k, v in self.seconds.items()},
                "total_s": round(self.total_s, 1), "tail_s": _round(self.tail_s),
                "idle_s": _round(self.idle_s), "waited_s": _round(self.waited_s),
                "load_steps": {k: round(v, 1) for k, v in self.load_steps.items()},
                "gpu_seconds": self.gpu_seconds(), "phase": self.phase}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


Mark = tuple[float, str, str]  # (epoch seconds, mark, value)


def parse_marks(text: str) -> dict[str, list[Mark]]:
    """Each job's marks in file order, from its last ``start`` on; malformed lines skipped."""
    jobs: dict[str, list[Mark]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) not in (3, 4) or len(parts[0]) > 64 \
                or (parts[2] not in PHASE_OF and parts[2] not in VALUES):
            continue
        try:
            when = float(parts[1])
        except ValueError:
            continue
        if not math.isfinite(when) or when <= 0:
            continue
        mark = (when, parts[2], parts[3] if len(parts) == 4 else "")
        if parts[2] == "start":
            jobs[parts[0]] = [mark]  # a rerun under the same id starts again
        elif parts[0] in jobs:
            jobs[parts[0]].append(mark)
    return jobs


def job_ledger(job_id: str, marks: list[Mark], *, now: float | None = None,
               submitted_at: float | None = None, task_ends: Iterable[float] = ()) -> JobLedger:
    """One job's phases from its marks (the first is its start)."""
    start = marks[0][0]
    gpus_text = marks[0][2]
    gpus = int(gpus_text) if gpus_text.isdigit() and int(gpus_text) <= MAX_GPUS else None
    seconds = dict.fromkeys(PHASES, 0.0)
    begun: dict[str, float] = {}
    order: list[tuple[float, str]] = []  # (when, phase or "" for the end), first marks only
    for when, name, _value in marks:
        if name not in PHASE_OF:
            continue
        phase = PHASE_OF[name]
        if phase in begun:
            continue
        begun[phase] = when
        order.append((max(when, order[-1][0] if order else start), phase))
    ended = any(p == "" for _, p in order)
    notes = []
    last = order[-1][0]
    if not ended:
        last = max(last, time.time() if now is None else now)
    for (when, phase), (after, _) in zip(order, [*order[1:], (last, "")], strict=True):
        if phase:
            seconds[phase] += max(0.0, after - when)
    if not ended:
        notes.append("no end mark: still running, or killed past the scheduler's grace")
    tail = _tail(sorted(task_ends), begun.get("tasks"), begun.get("teardown"))
    queued = start - submitted_at if submitted_at is not None and start >= submitted_at \
        else None
    return JobLedger(job_id, start, gpus, seconds, ended, queued, tail, tuple(notes),
                     phase=None if ended else order[-1][1], idle_s=_idle(marks, seconds["tasks"]))


def _idle(marks: list[Mark], tasks_s: float) -> float | None:
    """The tasks phase less the proxy's busy seconds (its last busy mark), never below 0."""
    busy = [value for _when, name, value in marks if name == BUSY]
    if not busy:
        return None
    try:
        seconds = float(busy[-1])
    except ValueError:
        return None
    return max(0.0, tasks_s - seconds) if math.isfinite(seconds) and seconds >= 0 else None


def append_mark(folder: Path, name: str, value: str) -> None:
    """One mark as the job script's ``mark`` writes it (preamble.j2), from the in-job proxy:
    its busy seconds as it stops. Only into a ledger this job began (its start mark made the
    file), of yours; a judge's proxy, whose folder has none, writes nothing."""
    job = os.environ.get("HPCEVAL_JOB_ID") or "local"
    try:
        fd = os.open(folder / LEDGER_FILE, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW
                     | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return
    try:
        if stat_problem(os.fstat(fd), plain=True) is None:
            os.write(fd, f"{job} {time.time():.6f} {name} {value}\n".encode())
    except OSError:
        pass  # a full disk: the phase is shown as unknown
    finally:
        os.close(fd)


def _tail(ends: list[float], tasks_from: float | None, tasks_to: float | None) -> float | None:
    """The last task alone: the last end after the one before it, inside the tasks phase."""
    if tasks_from is None:
        return None
    inside = [e for e in ends if e >= tasks_from and (tasks_to is None or e <= tasks_to + 1)]
    if len(inside) < 2:
        return None
    return inside[-1] - inside[-2]


def read_ledger(model_dir: Path, *, submitted: Mapping[str, float] | None = None,
                now: float | None = None, details: bool = True
                ) -> tuple[list[JobLedger], str | None]:
    """Every job's ledger of a model's folder, oldest first, and why none could be read (None
    when it was read, or there is none). Without ``details`` only the ledger file is read (no
    tail from the tasks' manifests, no load split from the server's log): `status`'s one read
    per running model."""
    try:
        data, _st = read_own_file(str(model_dir / LEDGER_FILE), READ_LIMIT)
    except Unread as exc:
        return [], None if exc.missing else f"{LEDGER_FILE} {exc}"
    marks = parse_marks(data.decode("utf-8", errors="replace"))
    ends = _task_ends(model_dir) if details else {}
    out = sorted((job_ledger(job, found, now=now, submitted_at=_submitted_at(submitted, job, found),
                             task_ends=ends.get(job, ())) for job, found in marks.items()),
                 key=lambda j: j.started_at)
    if not details:
        return out, None
    # the server's log is read once per job: only for the newest (a real model has a few
    # jobs; a damaged file of thousands must not mean thousands of reads)
    split = {j.job_id for j in out[-SPLIT_JOBS:]}
    return [dataclasses.replace(j, load_steps=_load_steps(model_dir, marks[j.job_id]))
            if j.job_id in split else j for j in out], None


def _submitted_at(submitted: Mapping[str, float] | None, job: str,
                  marks: list[Mark]) -> float | None:
    """When jobs.json says the job was submitted: by its id, else (a sweep's element) by the
    element id it marked."""
    if not submitted:
        return None
    if job in submitted:
        return submitted[job]
    element = next((value for _when, name, value in marks if name == ELEMENT), "")
    return submitted.get(element) if element else None


def _load_steps(model_dir: Path, marks: list[Mark]) -> dict[str, float]:
    """What the model's engine reported of this job's load, from its part of the head's log."""
    from hpceval.engines import engine_for

    values = {name: value for _when, name, value in marks}
    offset = values.get(LOG_FROM, "")
    try:
        steps = engine_for(values.get("launched", "")).load_steps
    except ValueError:  # an engine this version does not know
        return {}
    if not steps or not offset.isdigit():
        return {}
    try:
        text, _st = read_own_file(str(model_dir / SERVER_DIR / FIRST_SERVER_LOG), LOG_READ,
                                  offset=int(offset), truncate=True)
    except Unread:
        return {}
    found: dict[str, float] = {}
    log = text.decode("utf-8", errors="replace")
    for step, pattern in steps:
        matches = re.findall(pattern, log)
        with contextlib.suppress(ValueError):
            if matches:
                found[step] = float(matches[0])
    return found


def _task_ends(model_dir: Path) -> dict[str, list[float]]:
    """job id -> when its tasks ended (manifest.json of a finished task, else failed.json)."""
    out: dict[str, list[float]] = {}
    tasks = model_dir / TASKS_DIR
    try:
        folders = sorted(p for p in tasks.iterdir() if p.is_dir())[:10_000]
    except OSError:
        return out
    for folder in folders:
        record = _own_record(folder / MANIFEST_FILE) or _own_record(folder / FAILED_FILE)
        if not record:
            continue
        slurm = record.get("slurm") if isinstance(record.get("slurm"), dict) else {}
        job = str((slurm or {}).get("job_id") or "local")
        end = _epoch(record.get("finished_at"))
        if end is not None:
            out.setdefault(job, []).append(end)
    return out


def _own_record(path: Path) -> dict[str, Any] | None:
    """A task's manifest or failure record, read like the ledger itself (yours, one
    descriptor, bounded); None otherwise: a planted one moves no phase."""
    try:
        record, _mtime = read_json_once(str(path), RECORD_LIMIT, "a few KiB")
    except Unread:
        return None
    return record if isinstance(record, dict) else None


def _epoch(text: Any) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def ledger_line(job: JobLedger) -> str:
    """One job in words: `hpceval info`."""
    held = f" on {job.gpus} GPU(s)" if job.gpus else ""
    parts = []
    within = [f"last task alone {job.tail_s:.0f} s"] if job.tail_s is not None else []
    if job.waited_s is not None:
        within.append(f"waited for the first model's job {job.waited_s:.0f} s")
    if job.idle_s is not None:
        within.append(f"servers idle {job.idle_s:.0f} s")
    for name in PHASES:
        text = f"{name} {job.seconds[name]:.0f} s"
        if name == "tasks" and within:
            text += f" ({', '.join(within)})"
        if name == "load" and job.load_steps:
            text += " (" + ", ".join(f"{step} {s:.0f} s" for step, s in
                                     job.load_steps.items()) + ")"
        parts.append(text)
    text = f"job {job.job_id}: {job.total_s:.0f} s{held}: " + ", ".join(parts)
    gpu = job.gpu_seconds()
    if gpu and job.gpus:
        hours = sum(gpu.values()) / 3600
        idle = (gpu["setup"] + gpu["load"] + gpu["teardown"]) / 3600
        text += f"; {hours:.2f} GPU-hours, {idle:.2f} of them before or after the tasks"
    if job.queued_s is not None:
        text += f"; queued {job.queued_s:.0f} s before"
    return text + "".join(f" ({note})" for note in job.notes)


def sum_ledgers(models: Iterable[tuple[Sequence[JobLedger], str | None]],
                judges: Iterable[tuple[Sequence[JobLedger], str | None]] = ()
                ) -> dict[str, Any]:
    """Every job of these models (and of a sweep's ``judges``, in their own jobs) summed (each
    as read_ledger gives it: its jobs, why unknown): ``gpu_seconds`` and ``seconds`` (wall) per
    phase, ``tail_gpu_seconds`` and ``tail_s`` (the last task alone: part of tasks),
    ``idle_gpu_seconds`` and ``idle_s`` (no request in flight: part of tasks; jobs that
    recorded it), ``gpu_hours`` (all phases), ``jobs``, ``judge_jobs`` (of them), ``running``
    (no end mark: counted until now), ``no_gpus`` (jobs that did not say how many GPUs they
    held: in ``seconds``, not in the GPU figures), ``models`` (with a job) and ``unknown``
    (models and judges whose ledger was not read)."""
    seconds, gpu = dict.fromkeys(PHASES, 0.0), dict.fromkeys(PHASES, 0.0)
    tail_s = tail_gpu = idle_s = idle_gpu = 0.0
    count = {"models": 0, "unknown": 0, "jobs": 0, "judge_jobs": 0, "running": 0, "no_gpus": 0}
    tagged = [*((False, m) for m in models), *((True, j) for j in judges)]
    for judge, (jobs, why) in tagged:
        count["unknown"] += why is not None
        count["models"] += bool(jobs) and not judge
        count["judge_jobs"] += len(jobs) if judge else 0
        for job in jobs:
            count["jobs"] += 1
            count["running"] += not job.ended
            tail = min(job.tail_s or 0.0, job.seconds["tasks"])  # never more than its phase
            tail_s += tail
            idle = min(job.idle_s or 0.0, job.seconds["tasks"])
            idle_s += idle
            for name in PHASES:
                seconds[name] += job.seconds[name]
            if job.gpus is None:
                count["no_gpus"] += 1
                continue
            tail_gpu += tail * job.gpus
            idle_gpu += idle * job.gpus
            for name in PHASES:
                gpu[name] += job.seconds[name] * job.gpus
    return {**count, "seconds": {k: round(v, 1) for k, v in seconds.items()},
            "gpu_seconds": {k: round(v, 1) for k, v in gpu.items()},
            "tail_s": round(tail_s, 1), "tail_gpu_seconds": round(tail_gpu, 1),
            "idle_s": round(idle_s, 1), "idle_gpu_seconds": round(idle_gpu, 1),
            "gpu_hours": round(sum(gpu.values()) / 3600, 3)}
