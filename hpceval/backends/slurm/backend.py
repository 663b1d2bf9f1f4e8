"""The Slurm backend: sbatch, one shared rate-limited sacct poller, scancel + verification.

Finished job states are remembered in the user's cache (job-states.json), so later `status`
calls never ask sacct about them again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, cast

from hpceval.backends.base import (
    BackendFiles,
    BackendSettings,
    CancelReport,
    CpuJob,
    JobEntry,
    JobInfo,
    JobQuery,
    JobRequest,
    JobUsage,
    UsageQuery,
)
from hpceval.backends.slurm.arrays import ArrayPart, split_sweep
from hpceval.backends.slurm.client import SlurmClient
from hpceval.backends.slurm.commands import OWN_JOBS
from hpceval.backends.slurm.formats import carries_run, log_file
from hpceval.backends.slurm.records import base_job_id
from hpceval.backends.slurm.states import MAY_RUN_PROCESSES, JobStatus, Phase, classify
from hpceval.backends.views import ExecutionView, JobView, RunView
from hpceval.contract import AGGREGATE_SCRIPT, EXPORT_SCRIPT, LOG_DIR, model_dir
from hpceval.errors import ConfigIssue, HpcevalError
from hpceval.records import Reason, Role
from hpceval.storage import atomic_write_json, cache_dir

if TYPE_CHECKING:
    from hpceval.backends.slurm.poller import SacctPoller

STATES_FILE = "job-states.json"
# squeue states of a job that still holds (or waits for) resources (hpceval doctor waits on it)
ACTIVE_STATES = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED",
           "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED"}


class SlurmBackend:
    name: ClassVar[str] = "slurm"
    resubmits_itself: ClassVar[bool] = True  # sbatch works from inside a job
    accounted: ClassVar[bool] = True
    multi_node: ClassVar[bool] = True
    srun_steps: ClassVar[bool] = True
    confines_jobs: ClassVar[bool] = True  # slurmstepd's cgroup: devices, accounting, scancel
    schedules_later: ClassVar[bool] = True  # --begin and --dependency=singleton
    side_by_side: ClassVar[bool] = True
    partitions: ClassVar[bool] = True
    pulls_ahead: ClassVar[bool] = True
    runs_here: ClassVar[bool] = False  # on the nodes it allocates, not the login node
    own_jobs_command: ClassVar[str] = OWN_JOBS
    partials: ClassVar[str] = "backends/slurm"  # templates/backends/slurm/: srun, sbatch, ...

    def __init__(self, client: SlurmClient | None = None, *, poller: SacctPoller | None = None,
                 min_interval_s: float = 2.0) -> None:
        self._client = client
        self._poller = poller
        self._min_interval_s = min_interval_s
        self._cache: dict[str, list[str]] | None = None  # read on first use: no I/O before
        self._dirty = False
        self._calls_at_follow = -1  # the poller's count when job_states last deferred a call

    @classmethod
    def from_settings(cls, settings: BackendSettings) -> SlurmBackend:
        """The registry's factory (``hpceval.backends.BACKENDS``)."""
        client = cast("SlurmClient | None", settings.client)  # the caller's fake, or none
        return cls(client, poller=settings.poller, min_interval_s=settings.min_interval_s)

    @property
    def client(self) -> SlurmClient:
        if self._client is None:
            from hpceval.backends.slurm.client import CommandSlurmClient

            self._client = CommandSlurmClient()
        return self._client

    @property
    def poller(self) -> SacctPoller:
        if self._poller is None:
            from hpceval.backends.slurm.poller import (
                SacctPoller,  # submitit: only when states are asked
            )

            self._poller = SacctPoller(self.client, min_interval_s=self._min_interval_s)
        return self._poller

    # -- Backend ----------------------------------------------------------------------------

    def scripts(self, files: BackendFiles) -> dict[str, str]:
        # A sweep's table is written by a dependent CPU job once every element has ended;
        # export.destinations are sent by another (hpceval.job export).
        scripts = {AGGREGATE_SCRIPT: files.aggregate} if files.aggregate is not None else {}
        if files.export is not None:
            scripts[EXPORT_SCRIPT] = files.export
        return scripts

    def submit(self, run_dir: Path, request: JobRequest) -> list[JobEntry]:
        if not request.sweep or not request.models:
            return [self._submit(run_dir, request, [], _dependency(request))]
        # A sweep: as few arrays as MaxArraySize allows (hpceval.backends.slurm.arrays). One
        # that fits keeps the script's own --array unless only some elements run (a resume).
        parts = split_sweep(request.elements if request.elements is not None
                            else request.models, self.client.max_array_size(),
                            request.max_parallel)
        entries: list[JobEntry] = []
        try:
            for part in parts:
                entries.append(self._submit_part(run_dir, request, part, len(parts), entries))
        except HpcevalError:
            # all or none: arrays without the rest of their sweep would run unrecorded
            with contextlib.suppress(HpcevalError):
                self.client.cancel([e.id for e in entries])
            raise
        return entries

    def _submit_part(self, run_dir: Path, request: JobRequest, part: ArrayPart, parts: int,
                     earlier: Sequence[JobEntry]) -> JobEntry:
        # --array on the command line overrides the script's: the same dispatcher runs only
        # these elements, each running model offset + its index (the script's argument).
        whole = parts == 1 and request.elements is None
        extra = [] if whole else [f"--array={part.spec()}"]
        waits = () if part.waits_for is None else (earlier[part.waits_for].id,)
        needs = _dependency(dataclasses.replace(request, after=(*request.after, *waits)))
        entry = self._submit(run_dir, request, extra, needs,
                             [str(part.offset)] if part.offset else [])
        return dataclasses.replace(entry, models=part.models, offset=part.offset)

    def _submit(self, run_dir: Path, request: JobRequest, extra: list[str],
                dependency: str | None, script_args: Sequence[str] = ()) -> JobEntry:
        if request.begin is not None:
            extra = [*extra, f"--begin={request.begin}"]
        submitted_at = time.time()  # before sbatch: sacct -S must not hide this job
        script = run_dir / request.script
        job_id = self.client.submit(script, extra_args=extra, dependency=dependency,
                                    script_args=script_args)
        return JobEntry(job_id, self.name, request.role, request.models, request.sweep,
                        submitted_at, request.reason, aux=request.aux)

    def states(self, queries: Sequence[JobQuery], *, force: bool = False) -> list[JobStatus]:
        self._register([q for q in queries if not q.finished])
        self.poller.refresh(force=force)  # no call when nothing registered is unfinished
        answers = [self._status(q.entry, q.index) for q in queries]
        self._save_cache()
        return answers

    def cancel(self, run_dir: Path, entries: Sequence[JobEntry], *,
               mark: Callable[[list[str]], None], verify_s: float,
               sleep: Callable[[float], None], run_id: str | None = None) -> CancelReport:
        ids = [e.id for e in entries]
        if not ids:
            return CancelReport([], [], {})
        skipped, foreign = self._not_ours(ids, run_id)
        ids = [i for i in ids if i not in skipped and i not in foreign]
        if not ids:
            return CancelReport([], [], {}, skipped, foreign)
        mark(ids)
        self.client.cancel(ids)  # base ids: scancel takes every task of an array with them
        deadline = time.monotonic() + verify_s
        while True:
            queue = self.client.squeue(ids)
            active = sorted(j for j, e in queue.items() if e.state in ACTIVE_STATES)
            if not active or time.monotonic() >= deadline:
                break
            sleep(1.0)
        final = {j: e.state for j, e in queue.items()}
        if not active:
            # squeue forgets jobs after MinJobAge; sacct is the record that stays. One call.
            records = self.client.sacct(ids)
            final.update({j: r.state for j, r in records.items()})
            active = sorted(j for j, r in records.items()
                            if r.state in ACTIVE_STATES - {"COMPLETING"})
        return CancelReport(ids, active, final, skipped, foreign)

    def _not_ours(self, ids: Sequence[str], run_id: str | None
                  ) -> tuple[dict[str, int], dict[str, str]]:
        """From ONE squeue call: the ids owned by another uid (id -> uid), and, with `run_id`,
        the user's own jobs whose comment does not carry that run's id (id -> comment; the
        header writes it, formats.run_comment). A jobs.json (or a watch's tick list) may name
        anyone's job, and any job of the user's: a user who may cancel others' jobs (root, an
        operator) must not cancel them through it, and nobody their own training job. A job
        squeue no longer shows has ended: cancelling it is harmless."""
        import os

        me = os.getuid()
        owners: dict[str, int] = {}
        foreign: dict[str, str] = {}
        for job_id, entry in self.client.squeue(ids).items():
            base = base_job_id(job_id)
            named = base if base in ids else job_id
            if entry.user_id is not None and entry.user_id != me:
                owners.setdefault(named, entry.user_id)
            elif (run_id is not None and entry.comment is not None
                  and not carries_run(entry.comment, run_id)):
                foreign.setdefault(named, entry.comment)
        return ({j: uid for j, uid in owners.items() if j in ids},
                {j: c for j, c in foreign.items() if j in ids and j not in owners})

    def query(self, job_ids: Sequence[str], *, queue: bool = False) -> dict[str, JobInfo]:
        ids = list(job_ids)
        # squeue first: sacct lags a job submitted a second ago; sacct for one that ended
        # longer ago than the controller keeps it in the queue (MinJobAge)
        found = {j: JobInfo(classify(e)) for j, e in self.client.squeue(ids).items()
                 if j in ids} if queue else {}
        for job_id, record in self.client.sacct(ids).items():
            if job_id in ids:
                end = record.end.timestamp() if record.end is not None else None
                found[job_id] = JobInfo(classify(record), end)
        return found

    def job_runs(self, job_id: str) -> bool | None:
        from hpceval.backends.slurm.client import queue_state

        state = queue_state(job_id)  # "" when Slurm no longer knows it
        return None if state is None else state in MAY_RUN_PROCESSES

    @property
    def scheduler_calls(self) -> int:
        return self.poller.sacct_calls

    def job_states(self, jobs: Sequence[tuple[str, float]], *, ask: bool = True
                   ) -> list[JobStatus]:
        for job_id, since in jobs:
            self.poller.register(job_id, submitted_at=_dt(since))
        if not ask:
            self._calls_at_follow = self.poller.sacct_calls
        elif jobs and self.poller.sacct_calls == self._calls_at_follow:
            self.poller.refresh(force=True)  # no call since: ask for these alone
        return [self.poller.status(job_id) for job_id, _ in jobs]

    def usage(self, jobs: Sequence[UsageQuery], *, ask: bool = True) -> list[JobUsage | None]:
        # sacct's AllocTRES (gres/gpu, node) and Elapsed, from the poller's records: jobs
        # registered here are in the poller's next call, the one `states` makes too
        for job in jobs:
            self.poller.register(job.job_id, submitted_at=_dt(job.submitted_at))
        if ask:
            self.poller.refresh(force=True)
        found: list[JobUsage | None] = []
        for job in jobs:
            record = self.poller.record(job.job_id)
            if record is None or record.alloc_gpus is None or record.elapsed_s is None:
                found.append(None)
                continue
            found.append(JobUsage(job.job_id, record.elapsed_s, record.alloc_gpus,
                                  record.alloc_nodes or 0,
                                  self.poller.status(job.job_id).terminal))
        return found

    def resubmit_after(self, run_dir: Path, script: Path, after: Sequence[str], *,
                       role: Role) -> JobEntry:
        submitted_at = time.time()
        job_id = self.client.submit(script, dependency="afterany:" + ":".join(after))
        return JobEntry(job_id, self.name, role, (), False, submitted_at, Reason.AUTO_RESUME)

    def log_path(self, run_dir: Path, key: str, index: int, entry: JobEntry) -> Path:
        # the --output of the rendered header (backends/slurm/header.py)
        if entry.array:
            return run_dir / LOG_DIR / log_file(entry.id, entry.element(index))
        return self.own_log(model_dir(run_dir, key), entry)

    def own_log(self, folder: Path, entry: JobEntry) -> Path:
        return folder / log_file(entry.id)

    def describe(self, entry: JobEntry, models: int) -> str:
        if not entry.array:
            return f"job {entry.id}"
        first = f", from model {entry.offset}" if entry.offset else ""
        return f"array job {entry.id} ({models} models{first})"

    # -- the dialect of its job scripts (header.py, validation.py) ---------------------------

    def header(self, spec: RunView, ctx: JobView, log_dir: str, nodes: int, *,
               role: Role = Role.MAIN) -> list[str]:
        from hpceval.backends.slurm.header import job_header

        return job_header(spec, ctx, log_dir, nodes, role)

    def cpu_header(self, ex: ExecutionView, job: CpuJob) -> list[str]:
        from hpceval.backends.slurm.header import cpu_header

        return cpu_header(ex, job)

    def log_name(self, role: str) -> str:
        from hpceval.backends.slurm.header import log_name

        return log_name(role)

    def walltime_within(self, ex: ExecutionView, wanted: str) -> tuple[str, bool]:
        """Within the partition's, QOS's and association's limits; where no partition can be
        seen (render on a machine without Slurm) none is known: one allocation's
        execution.walltime (submit refuses a longer one), continued in successors."""
        from hpceval.backends.slurm.partitions import capped_walltime, job_place, partition_seen

        place = job_place(ex)
        if not partition_seen(place.partition):
            return ex.walltime, True
        walltime, capped = capped_walltime(wanted, place.partition, place.qos, place.account)
        return walltime, capped is not None

    def spec_issues(self, ex: ExecutionView, *, ask: bool) -> list[ConfigIssue]:
        from hpceval.backends.slurm.validation import spec_issues

        return spec_issues(ex, ask=ask)

    def submit_issues(self, ex: ExecutionView, jobs: Sequence[Role]) -> list[ConfigIssue]:
        from hpceval.backends.slurm.submit_limits import submit_issues

        return submit_issues(ex, jobs)

    # -- internals --------------------------------------------------------------------------

    def _register(self, queries: Sequence[JobQuery]) -> None:
        arrays: dict[str, tuple[JobEntry, list[int]]] = {}
        for q in queries:
            if self._cached(q.entry, q.index) is not None:
                continue
            if q.entry.array:
                arrays.setdefault(q.entry.id, (q.entry, []))[1].append(q.entry.element(q.index))
            else:
                self.poller.register(q.entry.id, submitted_at=_dt(q.entry.submitted_at))
        for base, (entry, indices) in arrays.items():
            known = {j for j in self.poller.job_ids if j.startswith(f"{base}_")}
            wanted = sorted(set(indices) | {int(j.split("_")[1]) for j in known})
            self.poller.register_array(base, wanted, submitted_at=_dt(entry.submitted_at))

    def _cached(self, entry: JobEntry, index: int) -> JobStatus | None:
        hit = self._states_cache().get(_cache_key(entry, index))
        return JobStatus(Phase(hit[0]), hit[1], hit[2]) if hit else None

    def _status(self, entry: JobEntry, index: int) -> JobStatus:
        cached = self._cached(entry, index)
        if cached is not None:
            return cached
        status = self.poller.status(entry.scheduler_id(index))
        # PREEMPTED / NODE_FAIL jobs may be requeued by Slurm under the same id: not cached.
        if status.terminal and not status.raw_state.startswith(("PREEMPTED", "NODE_FAIL")):
            self._states_cache()[_cache_key(entry, index)] = [
                status.phase.value, status.reason, status.raw_state]
            self._dirty = True
        return status

    def _states_cache(self) -> dict[str, list[str]]:
        if self._cache is None:
            try:
                data = json.loads((cache_dir() / STATES_FILE).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                data = {}
            self._cache = data if isinstance(data, dict) else {}
        return self._cache

    def _save_cache(self) -> None:
        if self._cache is None or not self._dirty:
            return
        self._dirty = False
        # Only a cache: if it cannot be written, status still works and asks sacct next time.
        with contextlib.suppress(OSError):
            atomic_write_json(cache_dir() / STATES_FILE, self._cache)


def _dependency(request: JobRequest) -> str | None:
    # after: the judge has STARTED (the elements then wait for its endpoint themselves);
    # afterany: every job of `after` has ENDED, however (a split sweep's arrays, all of
    # them); singleton: no other job of this name runs (a watch's ticks). A comma means all.
    needs = [f"after:{':'.join(request.started_after)}"] if request.started_after else []
    needs += [f"afterany:{':'.join(request.after)}"] if request.after else []
    needs += ["singleton"] if request.singleton else []
    return ",".join(needs) or None


def _dt(ts: float) -> datetime:
    return datetime.fromtimestamp(ts).astimezone()


def _cache_key(entry: JobEntry, index: int) -> str:
    # The submit time tells two jobs apart that got the same id (ids restart after a wipe).
    return f"{entry.scheduler_id(index)}@{int(entry.submitted_at)}"
