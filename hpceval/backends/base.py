"""The execution-backend interface: where a run's jobs run, how they are followed and stopped.

A backend submits a script (or a sweep's array of elements) with an optional dependency,
reports the states of many jobs in one call, and cancels jobs. The controller (hpceval.runs)
talks only to this interface; whether a job is a Slurm job or a process on this machine is the
backend's business. A judge job, a checkpoint watcher or another scheduler plug in here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeAlias

from hpceval.backends.views import ExecutionView, JobView, RunView
from hpceval.contract import model_dir
from hpceval.errors import ConfigIssue
from hpceval.phases import JobStatus
from hpceval.records import Reason, Role

# A scheduler's command client that a caller may hand the backends (in tests, a recording fake
# of the scheduler's commands). Opaque above the backends: the controller, the API and the
# watch pass it on to backend_for, and only the backend of that scheduler reads it (Slurm's:
# backends.slurm.client.SlurmClient).
SchedulerClient: TypeAlias = object


@dataclass(frozen=True)
class BackendSettings:
    """What the controller passes every backend it makes (``backend_for``); each reads its own.

    ``client`` is the scheduler's command client (a fake in tests), ``poller`` a shared status
    poller, ``min_interval_s`` the poller's rate limit; a backend without a scheduler reads none.
    """

    client: SchedulerClient | None = None
    poller: Any = None
    min_interval_s: float = 2.0


@dataclass(frozen=True)
class JobEntry:
    """One job (or local process) in a run's chain, as recorded in jobs.json."""

    id: str  # Slurm job id (the array's base id) or "local-<pid>"
    kind: str  # the backend that runs it: slurm | local
    role: Role
    models: tuple[int, ...]  # model indices this job runs (array elements of a sweep)
    array: bool  # True: model i runs as array task "<id>_<i - offset>"
    submitted_at: float
    reason: Reason = Reason.SUBMIT
    pid: int | None = None  # local runs: the runner's pid (its own session and group)
    pid_start: int | None = None  # /proc start time of that pid, so a reused pid is not ours
    host: str | None = None
    cancelled_at: float | None = None
    aux: str | None = None  # role judge: the auxiliary deployment it serves
    # an array: the model its element 0 runs (a sweep larger than the scheduler allows in one
    # array is several, each from its own offset; the dispatcher adds it to its element index)
    offset: int = 0

    def element(self, model_index: int) -> int:
        """The array element that runs model `model_index`."""
        return model_index - self.offset

    def scheduler_id(self, model_index: int) -> str:
        return f"{self.id}_{self.element(model_index)}" if self.array else self.id

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["models"] = list(self.models)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> JobEntry:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["models"] = tuple(values.get("models", ()))
        values["id"] = str(values["id"])
        values["role"] = Role(values["role"])
        values["reason"] = Reason(values.get("reason", Reason.SUBMIT))
        return cls(**values)


@dataclass(frozen=True)
class JobRequest:
    """One submission: a script of the run directory and what it runs."""

    script: str  # relative to the run directory
    models: tuple[int, ...] = ()  # model indices it runs (() for a job that runs none)
    keys: tuple[str, ...] = ()  # their directory names; () means every model of the run
    sweep: bool = False  # a sweep: one array element per model
    elements: tuple[int, ...] | None = None  # run only these elements (None: as the script says)
    max_parallel: int | None = None  # at most this many elements at once (with `elements`)
    after: tuple[str, ...] = ()  # job ids this one waits for, whatever their end
    begin: str | None = None  # start no earlier than this (sbatch --begin: "now+600")
    singleton: bool = False  # never alongside another job of the same name (a watch's tick)
    role: Role = Role.MAIN
    reason: Reason = Reason.SUBMIT
    # job ids that must have STARTED before this one starts (a sweep's judge jobs)
    started_after: tuple[str, ...] = ()
    aux: str | None = None  # role judge: the auxiliary deployment's name


@dataclass(frozen=True)
class JobQuery:
    """A question for `Backend.states`: the job working on one model of a run."""

    entry: JobEntry
    run_dir: Path
    key: str  # the model's directory name
    index: int  # the model's index (its array element in a sweep)
    finished: bool = False  # every task is done on disk: no need to ask the scheduler

    @property
    def model_dir(self) -> Path:
        return model_dir(self.run_dir, self.key)


@dataclass(frozen=True)
class JobInfo:
    """What `Backend.query` knows about one job id: its status and, once ended, when."""

    status: JobStatus
    ended_at: float | None = None  # epoch seconds; None while it runs or when not known


@dataclass(frozen=True)
class UsageQuery:
    """A question for `Backend.usage`: what one job (or array element) held, and how long."""

    job_id: str  # as the backend names one job: "12", "12_3" (an array element), "local-42"
    submitted_at: float  # JobEntry.submitted_at: tells two jobs apart that got the same id
    run_dir: Path
    key: str  # the model's directory name (or the judge's aux folder) it worked on


@dataclass(frozen=True)
class JobUsage:
    """What a job held (GPUs and nodes) and for how long: the allocation budget is charged
    for held GPUs, busy or not."""

    job_id: str
    elapsed_s: int
    gpus: int
    nodes: int
    final: bool  # the job ended: these numbers no longer change

    @property
    def gpu_hours(self) -> float:
        return self.gpus * self.elapsed_s / 3600.0

    @property
    def node_hours(self) -> float:
        return self.nodes * self.elapsed_s / 3600.0


@dataclass(frozen=True)
class CancelReport:
    cancelled: list[str]  # job ids (or local runner ids) that were signalled
    still_active: list[str]  # what was still alive at the end: should be empty
    final: dict[str, str]  # job id -> state seen by the last check
    # job id -> its owner's uid: left alone, as it is another user's (a planted jobs.json)
    skipped: dict[str, int] = dataclasses.field(default_factory=dict)
    # job id -> its comment: the user's own job, but not one of this run's (its comment does
    # not carry the run's id): left alone, as a jobs.json may name any job of the user's
    foreign: dict[str, str] = dataclasses.field(default_factory=dict)


@dataclass(frozen=True)
class BackendFiles:
    """What a backend needs to add its own scripts to a new run directory."""

    run_dir: Path
    models: tuple[tuple[str, str], ...]  # (model key, its job script relative to run_dir)
    walltime: str
    signal_seconds: int
    python: str
    aggregate: str | None = None  # a sweep's aggregation script, for a backend to run as a job
    export: str | None = None  # export.destinations: the export job's script (same idea)
    export_args: tuple[str, ...] = ()  # its module's options, for a backend that calls it
    # renders one of templates/ (name, values): all shell comes from there, and the render
    # layer hands its renderer down, so no backend imports it
    render: Callable[[str, dict[str, Any]], str] | None = None
    gpus: int = 0  # what one model's job holds (execution.nodes x gpus_per_node): its usage


@dataclass(frozen=True)
class CpuJob:
    """A small CPU job beside a run (a sweep's aggregation, the export, the pull job, a watch's
    tick) whose header a backend writes: the run's account and partition, no GPU."""

    role: str  # what it does; its log is Backend.log_name(role) in log_dir
    name: str  # the job's name (a watch's ticks share one)
    log_dir: str
    minutes: int  # its time limit
    why: str  # why that many minutes (a comment for the admin reading the script)
    cpu_why: str  # why that many CPUs
    invocation_id: str | None = None  # a run's own job: it carries the run's id (kill finds it)
    cpus: int = 1
    name_why: str = ""


class Backend(Protocol):
    """What the controller needs from an execution backend."""

    name: ClassVar[str]  # recorded as the run's kind and every JobEntry's kind
    # a job stopped at its walltime may submit its own successor (auto-resume, teardown.j2)
    resubmits_itself: ClassVar[bool]
    # its scheduler keeps a record of every job after it ended (`query` lists ended jobs)
    accounted: ClassVar[bool]
    # it can give a job several nodes (the local backend is this one machine)
    multi_node: ClassVar[bool]
    # its jobs start job steps with srun, so container_runtime pyxis (srun's plugin) works
    srun_steps: ClassVar[bool]
    # its jobs' processes are confined and accounted by the scheduler (a cgroup per job: the
    # GPUs it was given, its usage, cancelling it): containers that leave the job defeat that
    confines_jobs: ClassVar[bool]
    # it can queue a job to start later (JobRequest.begin) and keep one job of a name at a
    # time (JobRequest.singleton): what a checkpoint watch's self-resubmitting tick needs
    schedules_later: ClassVar[bool]
    # it runs jobs side by side, so a sweep's judge job (scope: sweep) serves the models' jobs
    side_by_side: ClassVar[bool]
    # its jobs go to partitions with a MaxTime (sinfo): a walltime above it is refused at submit
    partitions: ClassVar[bool]
    # a CPU job of the run pulls the images nothing staged before any job that holds GPUs
    # starts (PULL_SCRIPT): a server never waits for a pull with its GPUs idle. Without it (one
    # workstation, nothing held for others) the job that needs an image pulls it itself.
    pulls_ahead: ClassVar[bool]
    # its jobs run on the machine hpceval runs on: the local profile's `auto` values (this
    # machine's GPUs, the container runtime found here) describe where the job runs only then
    runs_here: ClassVar[bool]
    # the command that lists the user's own jobs with their ids, for messages that ask for one
    own_jobs_command: ClassVar[str]
    # its in-job dialect: a folder of templates/ with the partials every job script includes
    # by this name (env.j2: the job id, node list, array index and restart count under
    # hpceval's names; discover.j2: the NODES array; launch.j2: a server's step; successor.j2:
    # submit_after; preempted.j2: preempted; detach.j2: leave the allocation's environment;
    # stop.j2: stop_servers, the servers' end at teardown). A backend of another distribution
    # names a folder it ships as "package:folder" (hpceval.render.quoting.ShippedPartials)
    partials: ClassVar[str]

    def scripts(self, files: BackendFiles) -> dict[str, str]:
        """Scripts this backend adds to a new run directory (relative path -> text)."""
        ...

    def submit(self, run_dir: Path, request: JobRequest) -> list[JobEntry]:
        """Start (or queue) the request; the returned entries go into jobs.json. One job,
        except a sweep larger than the scheduler takes as one array: several arrays, each
        entry with the models it runs (what depends on the sweep waits for all of them)."""
        ...

    def states(self, queries: Sequence[JobQuery], *, force: bool = False) -> list[JobStatus]:
        """The state of each query's job, in order: ONE scheduler call for all of them at
        most, and none when the last one was too recent (unless `force`)."""
        ...

    def cancel(self, run_dir: Path, entries: Sequence[JobEntry], *,
               mark: Callable[[list[str]], None], verify_s: float,
               sleep: Callable[[float], None], run_id: str | None = None) -> CancelReport:
        """Stop every job of `entries` that still runs; `mark(ids)` records the cancellation
        before any signal, so status reads "cancelled" even if we are stopped mid-way. With
        `run_id` (the run's invocation id), a job the backend can tell is not that run's is
        left alone (CancelReport.foreign)."""
        ...

    def job_runs(self, job_id: str) -> bool | None:
        """Inside a job: whether another job of this scheduler may still run processes (the
        owner of a cache lease); None when it cannot tell. One question, no client: the in-job
        side holds none."""
        ...

    def query(self, job_ids: Sequence[str], *, queue: bool = False) -> dict[str, JobInfo]:
        """The jobs among `job_ids` the scheduler lists, by id (ONE accounting call; `queue`
        asks the live queue first, which lists a job submitted a second ago). A job it does
        not list is absent. An HpcevalError when the scheduler cannot answer."""
        ...

    @property
    def scheduler_calls(self) -> int:
        """How many times it has asked its scheduler about jobs (what benchmarks and tests
        count: one call per status refresh, whatever the number of runs)."""
        ...

    def job_states(self, jobs: Sequence[tuple[str, float]], *, ask: bool = True
                   ) -> list[JobStatus]:
        """The states of jobs that are no run's (a watch's tick, the training job it waits
        for), as (id, submitted at) pairs, in order. With ``ask=False`` no call: these jobs
        ride in the next call `states` makes; with ``ask`` one call, only if no call has
        answered them since they were last passed with ``ask=False``."""
        ...

    def usage(self, jobs: Sequence[UsageQuery], *, ask: bool = True) -> list[JobUsage | None]:
        """What each job held and for how long, in order; None for one not accounted yet.
        ONE scheduler call at most for all of them; with `ask=False` none: what the last call
        said (a backend whose `states` and usage come from one call, as Slurm's poller,
        includes these jobs in its next one, so `status` asks once for both)."""
        ...

    def resubmit_after(self, run_dir: Path, script: Path, after: Sequence[str], *,
                       role: Role) -> JobEntry:
        """Queue `script` again, to start once every job of `after` has ended (however): a
        dependent job that must outlive auto-resume successors (export, aggregation)."""
        ...

    def log_path(self, run_dir: Path, key: str, index: int, entry: JobEntry) -> Path:
        """The job's own log for one model (it exists once the job has started)."""
        ...

    def own_log(self, folder: Path, entry: JobEntry) -> Path:
        """The log of a job whose script writes it into `folder` (a sweep's judge job, in its
        auxiliary folder): the file name is the backend's (Slurm: the header's --output)."""
        ...

    def describe(self, entry: JobEntry, models: int) -> str:
        """How the CLI names a submitted entry ("job 12", "local runner local-4242 ...")."""
        ...

    # The job script's header is the backend's dialect: render asks for it and writes each
    # line as it comes, so a scheduler's directives never appear above this package. Pure:
    # reads nothing but its arguments (golden tests hold it); a ConfigError names a key whose
    # value the dialect cannot write.

    def header(self, spec: RunView, ctx: JobView, log_dir: str, nodes: int, *,
               role: Role = Role.MAIN) -> list[str]:
        """The header lines of a job that serves (a model's job, a sweep's array with
        ``ctx.array``, a sweep's judge job with role JUDGE): ``nodes`` is its allocation's
        node count, its log goes into ``log_dir``. [] where the backend reads none."""
        ...

    def cpu_header(self, ex: ExecutionView, job: CpuJob) -> list[str]:
        """The header lines of a small CPU job of a run (or a watch) of ``ex``."""
        ...

    def log_name(self, role: str) -> str:
        """The file name (a pattern the scheduler expands) a job of ``role`` logs to in the
        folder it is given: a CPU job's (aggregate, export, pull, tick, doctor)."""
        ...

    def walltime_within(self, ex: ExecutionView, wanted: str) -> tuple[str, bool]:
        """(the longest time limit up to ``wanted`` a job of ``ex`` may ask for; whether that
        is less, so the job continues in successor jobs): a sweep's judge job, which must
        outlive every element, asks for execution.max_walltime."""
        ...

    def spec_issues(self, ex: ExecutionView, *, ask: bool) -> list[ConfigIssue]:
        """What this backend cannot run of an execution section, checked when a run is loaded
        (render raises the same as a guard). ``ask``: its scheduler may be asked for limits
        (False when rendering on another machine)."""
        ...

    def submit_issues(self, ex: ExecutionView, jobs: Sequence[Role]) -> list[ConfigIssue]:
        """What would make the scheduler refuse a run of ``ex`` midway, whose ``jobs`` (the
        role of each job it submits: a sweep's models are one Role.MAIN each) it takes
        (a limit on the jobs a user may have queued), asked once at submit before anything is
        written: a run is several submissions, and one refused leaves the others queued."""
        ...
