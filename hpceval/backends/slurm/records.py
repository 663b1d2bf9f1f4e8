"""Pure parsers for the text that sbatch, sacct, squeue and scontrol print.

Kept free of subprocess calls so the unit tests can feed them recorded output from several Slurm
releases (22.05 and 24.11 were both checked on the dev cluster) without a cluster.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime

from hpceval.errors import HpcevalError

# The columns CommandSlurmClient asks sacct for, in order. JobName is the only free-text column,
# so it is the one that absorbs stray "|" characters when a line has too many fields.
# AllocTRES and NNodes (what the job holds, for GPU-hours) come last: lines without them (output
# recorded before they were asked for) still parse, with the usage left unknown.
_STATE_FIELDS: tuple[str, ...] = (
    "JobID",
    "JobName",
    "State",
    "ExitCode",
    "Reason",
    "Start",
    "End",
    "Elapsed",
    "NodeList",
    "Submit",
    "Partition",
)
USAGE_FIELDS: tuple[str, ...] = ("AllocTRES", "NNodes")
SACCT_FIELDS: tuple[str, ...] = _STATE_FIELDS + USAGE_FIELDS
# %U: the owner's numeric uid; %k: the job's comment, which carries the run's id (kill checks
# both). The comment is last: it may hold "|" itself.
SQUEUE_FORMAT = "%i|%T|%r|%N|%U|%k"

# Largest array range we expand. Slurm's own MaxArraySize default is 1001; a bigger range in the
# output is almost certainly garbage and must not make us allocate millions of records.
_MAX_EXPANDED_TASKS = 100_000

# Slurm's default MaxArraySize: array indices 0..1000 (slurm.conf may set another)
DEFAULT_MAX_ARRAY_SIZE = 1001
_MAX_ARRAY_SIZE = re.compile(r"^\s*MaxArraySize\s*=\s*(\d+)\s*$", re.M)
_SBATCH_ID = re.compile(r"^(\d+)(?:;\S+)?$")
_ARRAY_RANGE = re.compile(r"^(?P<base>\d+)_\[(?P<spec>[^\]]+)\]$")
_TRES_TAIL = re.compile(r"^(?:[a-z][\w/:.-]*=[^,|]*(?:,[a-z][\w/:.-]*=[^,|]*)*)?$")
_ELAPSED = re.compile(r"^(?:(?P<d>\d+)-)?(?:(?P<h>\d+):)?(?P<m>\d+):(?P<s>\d+)(?:\.\d+)?$")


class SlurmParseError(HpcevalError, ValueError):
    """Output of a Slurm command that we cannot make sense of."""


@dataclass(frozen=True)
class JobRecord:
    """One job (or one array task) as sacct reports it; step rows are never turned into records."""

    job_id: str  # "12", "12_3" (array task) or "12+1" (het job component)
    state: str  # first word of the raw state, e.g. "CANCELLED" for "CANCELLED by 0"
    raw_state: str
    exit_code: int | None
    signal: int | None
    reason: str
    node_list: str
    name: str = ""
    submit: datetime | None = None
    start: datetime | None = None
    end: datetime | None = None
    elapsed_s: int | None = None
    partition: str = ""
    from_range: bool = False  # True when expanded from a pending "12_[2-5%2]" row
    alloc_gpus: int | None = None  # gres/gpu of AllocTRES: 0 when it holds none or not yet
    alloc_nodes: int | None = None  # node= of AllocTRES (NNodes when AllocTRES has none)

    @property
    def base_id(self) -> str:
        return base_job_id(self.job_id)

    @property
    def array_task(self) -> int | None:
        _, sep, task = self.job_id.partition("_")
        return int(task) if sep and task.isdigit() else None


@dataclass(frozen=True)
class QueueEntry:
    """One line of squeue: only what the controller knows right now (no exit codes)."""

    job_id: str
    state: str
    reason: str
    node_list: str
    user_id: int | None = None  # the owner's uid; None in output recorded without %U
    comment: str | None = None  # the job's --comment ("" for none); None: recorded without %k


def base_job_id(job_id: str) -> str:
    """'12_3' -> '12', '12+1' -> '12', '12.batch' -> '12': the id sacct -j accepts for the lot."""
    return re.split(r"[_+.]", job_id, maxsplit=1)[0]


def parse_sbatch_id(stdout: str) -> str:
    """Job id from `sbatch --parsable` output: "123" or "123;cluster" (multi-cluster setups).

    Site wrappers sometimes print banners before the id, so the last non-empty line is used.
    """
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    if not lines:
        raise SlurmParseError("sbatch --parsable printed no job id")
    match = _SBATCH_ID.match(lines[-1])
    if match is None:
        raise SlurmParseError(f"cannot read a job id from sbatch output: {lines[-1]!r}")
    return match.group(1)


def parse_max_array_size(text: str) -> int:
    """MaxArraySize from ``scontrol show config`` output (an array's indices stay below it)."""
    match = _MAX_ARRAY_SIZE.search(text)
    if match is None:
        raise SlurmParseError("scontrol show config printed no MaxArraySize line")
    return int(match.group(1))


def expand_array_ids(job_id: str) -> list[str]:
    """'12_[2-5%2]' -> ['12_2', ..., '12_5']; '12_[1,4-6:2]' -> ['12_1', '12_4', '12_6'].

    Any other id is returned unchanged as a one-element list.
    """
    match = _ARRAY_RANGE.match(job_id)
    if match is None:
        return [job_id]
    base = match.group("base")
    spec = match.group("spec").split("%", 1)[0]  # drop the "%N" concurrency throttle
    tasks: list[int] = []
    for part in spec.split(","):
        bounds, _, step_text = part.partition(":")
        first_text, _, last_text = bounds.partition("-")
        try:
            first = int(first_text)
            last = int(last_text) if last_text else first
            step = int(step_text) if step_text else 1
        except ValueError as exc:
            raise SlurmParseError(f"bad array range {job_id!r}") from exc
        if step < 1 or last < first or len(tasks) + (last - first) // step >= _MAX_EXPANDED_TASKS:
            raise SlurmParseError(f"bad or oversized array range {job_id!r}")
        tasks.extend(range(first, last + 1, step))
    return [f"{base}_{task}" for task in tasks]


def parse_time(text: str) -> datetime | None:
    """sacct timestamps are local ISO times; "Unknown", "None" and "" mean not (yet) set."""
    text = text.strip()
    if not text or text in ("Unknown", "None", "N/A"):
        return None
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None  # e.g. SLURM_TIME_FORMAT=relative slipped through: a time is not worth a crash


def parse_elapsed(text: str) -> int | None:
    """'1-02:03:04' -> 93784 seconds, '05:06' -> 306; anything else -> None."""
    match = _ELAPSED.match(text.strip())
    if match is None:
        return None
    parts = {key: int(value) if value else 0 for key, value in match.groupdict().items()}
    return ((parts["d"] * 24 + parts["h"]) * 60 + parts["m"]) * 60 + parts["s"]


def parse_exit_code(text: str) -> tuple[int | None, int | None]:
    """'3:0' -> (3, 0); '0:15' -> (0, 15) meaning killed by signal 15; '' -> (None, None)."""
    code, _, signal = text.strip().partition(":")
    try:
        return int(code), int(signal) if signal else 0
    except ValueError:
        return None, None


def normalize_state(raw: str) -> str:
    """'CANCELLED by 0' -> 'CANCELLED'; a trailing '+' (truncated column) is dropped too."""
    words = raw.strip().split()
    return words[0].rstrip("+").upper() if words else ""


def parse_alloc_tres(tres: str, nnodes: str = "") -> tuple[int, int | None]:
    """'billing=2,cpu=2,gres/gpu=4,node=2' -> (4 GPUs, 2 nodes); '' (nothing held) -> (0, None).

    Typed GRES ('gres/gpu:h100=4') is counted only when the untyped total is absent, since
    Slurm lists both for typed requests and they are the same GPUs.
    """
    total: int | None = None
    typed = 0
    nodes: int | None = None
    for item in tres.split(","):
        name, _, value = item.partition("=")
        if not value.isdigit():
            continue
        if name == "gres/gpu":
            total = int(value)
        elif name.startswith("gres/gpu:"):
            typed += int(value)
        elif name == "node":
            nodes = int(value)
    if nodes is None and tres.strip() and nnodes.strip().isdigit():
        nodes = int(nnodes)
    return (total if total is not None else typed), nodes


def _split_sacct_line(line: str) -> tuple[list[str], bool] | None:
    """The SACCT_FIELDS of one line, and whether it had the usage columns (else they are
    empty)."""
    fields = line.split("|")
    full = len(SACCT_FIELDS)
    last = fields[-1].strip()
    # Told apart by their tails: NNodes is a number and AllocTRES "name=value,...", where the
    # older lines end in a Submit timestamp and a partition name.
    with_usage = (len(fields) >= full and (last == "" or last.isdigit())
                  and _TRES_TAIL.match(fields[-2].strip()) is not None)
    n = full if with_usage else len(_STATE_FIELDS)
    if len(fields) < n:
        return None
    if len(fields) > n:  # a "|" inside the job name: glue the surplus back into JobName
        extra = len(fields) - n
        fields = [fields[0], "|".join(fields[1 : 2 + extra]), *fields[2 + extra :]]
    return (fields, True) if with_usage else ([*fields, "", ""], False)


def parse_sacct(text: str) -> dict[str, JobRecord]:
    """Parse `sacct --parsable2 --noheader -X -o <SACCT_FIELDS>` output into records by job id.

    * AllocTRES / NNodes give what a job holds (alloc_gpus, alloc_nodes), for GPU-hours;

    * step rows ("12.batch", "12.0", "12.extern") are skipped even if -X was not honoured;
    * pending array ranges are expanded into one record per task, but a task's own row always
      wins over a range row, whatever order sacct printed them in (24.11 keeps the range row
      for a while after tasks start);
    * for duplicate ids (requeued jobs), the later row wins: sacct prints oldest first;
    * placeholder rows are skipped: when slurmdbd hears of a job's batch step before the job
      itself (seen for multi-node jobs on 22.05), it lists a stand-in row for ~1-2 s with no
      partition, JobName "allocation", the first node only, and a state taken from the step
      (PENDING while the job runs, or already COMPLETED). Trusting it would misreport the job.
    """
    records: dict[str, JobRecord] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        split = _split_sacct_line(line)
        if split is None:
            raise SlurmParseError(f"sacct line has {line.count('|') + 1} fields: {line!r}")
        fields, with_usage = split
        (job_id, name, raw_state, exit_text, reason, start, end, elapsed, nodes, submit, part,
         tres, nnodes) = fields
        if "." in job_id or not part.strip():
            continue
        exit_code, signal = parse_exit_code(exit_text)
        gpus, alloc_nodes = parse_alloc_tres(tres, nnodes) if with_usage else (None, None)
        ids = expand_array_ids(job_id)
        from_range = len(ids) > 1 or ids[0] != job_id
        for task_id in ids:
            previous = records.get(task_id)
            if from_range and previous is not None and not previous.from_range:
                continue
            records[task_id] = JobRecord(
                job_id=task_id,
                state=normalize_state(raw_state),
                raw_state=raw_state.strip(),
                exit_code=exit_code,
                signal=signal,
                reason=reason.strip(),
                node_list=_node_list(nodes),
                name=name,
                submit=parse_time(submit),
                start=parse_time(start),
                end=parse_time(end),
                elapsed_s=parse_elapsed(elapsed),
                partition=part.strip(),
                from_range=from_range,
                alloc_gpus=gpus,
                alloc_nodes=alloc_nodes,
            )
    return records


def parse_squeue(text: str) -> dict[str, QueueEntry]:
    """Parse `squeue --noheader --array --format=SQUEUE_FORMAT` output (ranges expanded too);
    lines without the owner or comment column (recorded before they were asked for) still
    parse. The comment is everything after the sixth field's "|", as it was given."""
    entries: dict[str, QueueEntry] = {}
    for line in _nonblank(text):
        fields = [field.strip() for field in line.split("|", 5)]
        if len(fields) not in (4, 5, 6) or (len(fields) >= 5 and not fields[4].isdigit()):
            raise SlurmParseError(f"unexpected squeue line: {line!r}")
        job_id, state, reason, nodes = fields[:4]
        user_id = int(fields[4]) if len(fields) >= 5 else None
        comment = None if len(fields) < 6 else "" if fields[5] == "(null)" else fields[5]
        for task_id in expand_array_ids(job_id):
            entry = QueueEntry(task_id, normalize_state(state), reason, _node_list(nodes),
                               user_id, comment)
            entries.setdefault(task_id, entry)
    return entries


def _node_list(text: str) -> str:
    # A pending job's NodeList is "None assigned" (sacct) or "" (squeue): both mean no nodes.
    text = text.strip()
    return "" if text in ("None assigned", "(null)") else text


def _nonblank(text: str) -> Iterator[str]:
    return (line for line in text.splitlines() if line.strip())


def unique_base_ids(job_ids: Iterable[str]) -> list[str]:
    """Sorted, de-duplicated base ids: what one `sacct -j` needs to cover every given job/task."""
    return sorted({base_job_id(job_id) for job_id in job_ids}, key=_numeric_key)


def _numeric_key(job_id: str) -> tuple[int, str]:
    return (int(job_id), "") if job_id.isdigit() else (1 << 62, job_id)
