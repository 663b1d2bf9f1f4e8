"""execution.type memory: a second scheduler for hpceval, from another distribution.

What another scheduler's package brings, and nothing more: this package (the backend and the
scheduler it asks, here a queue in memory, hpceval_memory_backend.cluster), its in-job partials
(``partials/``, named "hpceval_memory_backend:partials": hpceval's renderer loads them from this
package) and one ``hpceval.backends`` entry point (``memory``). Its jobs never run: a test
drives each one's phase (MemoryCluster.set), and the controller (submit, status, kill, resume,
cost) works on them as on Slurm's. Its capabilities say what it does: it queues jobs side by
side, waits for dependencies and keeps a record of ended jobs; it runs no process anywhere, so
it starts nothing on several nodes, queues nothing for later and submits no successor.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ClassVar

from hpceval.backends import (
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
from hpceval.backends.views import ExecutionView, JobView, RunView
from hpceval.contract import AGGREGATE_SCRIPT, EXPORT_SCRIPT, model_dir
from hpceval.errors import ConfigIssue, HpcevalError
from hpceval.phases import JobStatus, Phase, combine
from hpceval.records import Role
from hpceval_memory_backend.cluster import CLUSTER, STATES, MemoryCluster, MemoryJob

__all__ = ["CLUSTER", "STATES", "MemoryBackend", "MemoryCluster", "MemoryJob"]

NOT_LISTED = JobStatus(Phase.UNKNOWN, "not listed by the in-memory scheduler")


class MemoryBackend:
    """The Backend protocol over a MemoryCluster: one cluster call per question."""

    name: ClassVar[str] = "memory"
    resubmits_itself: ClassVar[bool] = False  # its jobs run nothing that could submit
    accounted: ClassVar[bool] = True  # the cluster keeps every job after it ended
    multi_node: ClassVar[bool] = False  # nothing is started on other nodes (partials: here)
    srun_steps: ClassVar[bool] = False
    confines_jobs: ClassVar[bool] = False
    schedules_later: ClassVar[bool] = False  # no --begin, no singleton: refused at submit
    side_by_side: ClassVar[bool] = True  # every job is queued at once, each driven on its own
    partitions: ClassVar[bool] = False
    pulls_ahead: ClassVar[bool] = False
    runs_here: ClassVar[bool] = False  # it runs nowhere: this machine's GPUs say nothing
    own_jobs_command: ClassVar[str] = "(the test's MemoryCluster.jobs)"
    partials: ClassVar[str] = "hpceval_memory_backend:partials"  # this package's folder

    def __init__(self, cluster: MemoryCluster | None = None, min_interval_s: float = 0.0
                 ) -> None:
        self.cluster = cluster if cluster is not None else CLUSTER
        self._min_interval_s = min_interval_s
        self._calls = 0
        self._last: dict[str, JobStatus] = {}  # what the last states call said, by id
        self._last_at: float | None = None
        self._riders: set[str] = set()  # job_states(ask=False): ride in the next call
        self._answered: set[str] = set()  # ... and which a call has answered since
        self._usage: dict[str, JobUsage | None] = {}  # what the last usage call said

    @classmethod
    def from_settings(cls, settings: BackendSettings) -> MemoryBackend:
        """The entry point's factory: a MemoryCluster handed as the client is this backend's
        scheduler (another backend's client, such as the Slurm fake, is not: the process's)."""
        client = settings.client if isinstance(settings.client, MemoryCluster) else None
        return cls(client, settings.min_interval_s)

    def scripts(self, files: BackendFiles) -> dict[str, str]:
        # a sweep's table and the export are jobs of their own, queued after the models'
        scripts = {AGGREGATE_SCRIPT: files.aggregate} if files.aggregate is not None else {}
        if files.export is not None:
            scripts[EXPORT_SCRIPT] = files.export
        return scripts

    def submit(self, run_dir: Path, request: JobRequest) -> list[JobEntry]:
        """Queue the request: one job, or one array with an element per model (the request's
        ``elements`` on a resume). A script that is not there is refused, as sbatch would."""
        if request.begin is not None or request.singleton:
            raise HpcevalError("the memory backend queues nothing for later and keeps no job "
                               "names (JobRequest.begin, singleton)")
        script = run_dir / request.script
        if not script.is_file():
            raise HpcevalError(f"no job script {script} to submit")
        array = request.sweep and bool(request.models)
        elements = (request.elements if request.elements is not None
                    else request.models) if array else None
        job = self.cluster.add(script, run_dir, request.role,
                               (*request.after, *request.started_after), elements)
        return [JobEntry(job.id, self.name, request.role, request.models, array,
                         job.submitted_at, request.reason, aux=request.aux)]

    # -- following jobs ----------------------------------------------------------------------
    def _call(self, ids: Sequence[str]) -> None:
        """One cluster call about ``ids`` and the jobs riding along (job_states, ask=False);
        what it says is what ``states`` and ``job_states`` answer until the next one."""
        asked = [*ids, *sorted(self._riders - set(ids))]
        found = self.cluster.ask("states", asked)
        self._calls += 1
        self._last.update({i: combine(j.status for j in found[i]) if i in found else NOT_LISTED
                           for i in asked})
        self._answered.update(asked)
        self._riders.clear()

    def states(self, queries: Sequence[JobQuery], *, force: bool = False) -> list[JobStatus]:
        ids = [q.entry.scheduler_id(q.index) for q in queries if not q.finished]
        recent = (self._last_at is not None
                  and time.monotonic() - self._last_at < self._min_interval_s)
        if ids and (force or not recent or any(i not in self._last for i in ids)):
            self._call(ids)
            self._last_at = time.monotonic()
        return [JobStatus(Phase.DONE, "every task is done") if q.finished
                else self._last.get(q.entry.scheduler_id(q.index), NOT_LISTED)
                for q in queries]

    def job_states(self, jobs: Sequence[tuple[str, float]], *, ask: bool = True
                   ) -> list[JobStatus]:
        ids = [job_id for job_id, _ in jobs]
        if not ask:
            self._riders.update(ids)
            self._answered.difference_update(ids)
        elif ids and not self._answered.issuperset(ids):
            self._call(ids)
        return [self._last.get(i, NOT_LISTED) for i in ids]

    @property
    def scheduler_calls(self) -> int:
        return self._calls

    def query(self, job_ids: Sequence[str], *, queue: bool = False) -> dict[str, JobInfo]:
        if not job_ids:
            return {}
        found = self.cluster.ask("query", job_ids)
        self._calls += 1
        out = {}
        for job_id, jobs in found.items():  # an array: one status for its elements
            ended = [j.ended_at for j in jobs]
            out[job_id] = JobInfo(combine(j.status for j in jobs),
                                  None if None in ended else max(e or 0.0 for e in ended))
        return out

    def usage(self, jobs: Sequence[UsageQuery], *, ask: bool = True) -> list[JobUsage | None]:
        """What the test said each job held; None for a job that never started (or is none of
        this cluster's, or an earlier one's of the same id)."""
        if ask and jobs:
            found = self.cluster.ask("usage", [q.job_id for q in jobs])
            self._calls += 1
            now = time.time()
            for q in jobs:
                job = found[q.job_id][0] if q.job_id in found else None
                elapsed = job.elapsed(now) if job is not None else None
                same = job is not None and abs(job.submitted_at - q.submitted_at) < 1.0
                self._usage[q.job_id] = JobUsage(q.job_id, elapsed, job.gpus, job.nodes,
                                                 not job.live) if (
                    job is not None and same and elapsed is not None) else None
        return [self._usage.get(q.job_id) for q in jobs]

    def job_runs(self, job_id: str) -> bool | None:
        return None  # asked inside a job: this scheduler lives in a test's process, not there

    # -- stopping ----------------------------------------------------------------------------
    def cancel(self, run_dir: Path, entries: Sequence[JobEntry], *,
               mark: Callable[[list[str]], None], verify_s: float,
               sleep: Callable[[float], None], run_id: str | None = None) -> CancelReport:
        """Cancel what still runs of ``entries``; a job queued for another run directory than
        the run's (``run_id`` is its folder's name) is left alone, as foreign."""
        ids = [e.id for e in entries]
        found = self.cluster.ask("cancel-check", ids)
        self._calls += 1
        foreign = {i: str(jobs[0].run_dir) for i, jobs in found.items()
                   if run_id is not None and jobs[0].run_dir.name != run_id}
        live = [i for i in ids if i in found and i not in foreign
                and any(j.live for j in found[i])]
        if not live:
            return CancelReport([], [], {}, foreign=foreign)
        mark(live)
        self.cluster.cancel(live)
        left: list[str] = live
        final: dict[str, str] = {}
        waited = 0.0
        while True:
            after = self.query(live)
            final = {i: info.status.phase.value for i, info in after.items()}
            left = [i for i in live if i in after and not after[i].status.terminal]
            if not left or waited >= verify_s:
                break
            sleep(1.0)
            waited += 1.0
        return CancelReport(live, left, final, foreign=foreign)

    def resubmit_after(self, run_dir: Path, script: Path, after: Sequence[str], *,
                       role: Role) -> JobEntry:
        raise HpcevalError(f"the memory backend queues no job after another ({role} after "
                           f"{', '.join(after)}): its jobs submit no successors to wait for")

    # -- files and words ---------------------------------------------------------------------
    def log_path(self, run_dir: Path, key: str, index: int, entry: JobEntry) -> Path:
        return self.own_log(model_dir(run_dir, key), entry)

    def own_log(self, folder: Path, entry: JobEntry) -> Path:
        return folder / f"memory-{entry.id}.log"  # a test writes it where a job would

    def describe(self, entry: JobEntry, models: int) -> str:
        elements = f" ({models} array elements)" if entry.array else ""
        return f"in-memory job {entry.id}{elements}"

    def header(self, spec: RunView, ctx: JobView, log_dir: str, nodes: int, *,
               role: Role = Role.MAIN) -> list[str]:
        # no directives: nothing reads them; one comment says which scheduler the script is for
        return [f"# execution.type memory: a {Role(role).value} job on {nodes} node(s)"]

    def cpu_header(self, ex: ExecutionView, job: CpuJob) -> list[str]:
        return [f"# execution.type memory: a CPU job ({job.minutes} min)"]

    def log_name(self, role: str) -> str:
        return f"{role}.log"

    def walltime_within(self, ex: ExecutionView, wanted: str) -> tuple[str, bool]:
        return wanted, False  # no partition limits

    def spec_issues(self, ex: ExecutionView, *, ask: bool) -> list[ConfigIssue]:
        return []

    def submit_issues(self, ex: ExecutionView, jobs: Sequence[Role]) -> list[ConfigIssue]:
        return []  # no queue limits
