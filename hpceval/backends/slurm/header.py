"""The `#SBATCH` header, the Slurm backend's dialect (render asks for it).

Values sbatch parses itself are validated, not shell-quoted.

sbatch reads each `#SBATCH` line up to the first unquoted `#` or whitespace; double (and single)
quotes group a value and are removed, and a backslash escapes the next character. Measured on
Slurm 22.05: `--comment="{\\"a\\":1}"` arrives as `{"a":1}` while `--comment={"a":1}` loses its
quotes. So values that need it are written in double quotes with `\\` and `"` escaped; what
cannot be written on one line at all (newlines, other control characters) is a ConfigError that
names the key.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any

from hpceval.backends import requeues_on_node_failure
from hpceval.backends.base import CpuJob
from hpceval.backends.slurm.formats import (
    SBATCH_FLAG,
    SBATCH_UNWRITABLE,
    log_file,
    run_comment,
    slurm_filename,
)
from hpceval.backends.views import ExecutionView, JobView, RunView
from hpceval.errors import ConfigError, ConfigIssue
from hpceval.records import Role

_PLAIN = re.compile(r"^[A-Za-z0-9_+=:,./@%{}\[\]-]+$")  # safe without quotes on an #SBATCH line
_BAD = SBATCH_UNWRITABLE


@dataclass(frozen=True)
class HeaderLine:
    flag: str
    value: str | None  # None: a bare flag such as --exclusive
    why: str = ""  # a comment for the admin reading the script

    def text(self) -> str:
        line = f"#SBATCH --{self.flag}" + ("" if self.value is None else f"={self.value}")
        return f"{line:<44} # {self.why}" if self.why else line


def sbatch_value(value: Any, key: str) -> str:
    """One value as sbatch will read it back unchanged, or ConfigError naming ``key``."""
    text = str(value).lower() if isinstance(value, bool) else str(value)
    if _BAD.search(text):
        raise ConfigError.at(key, f"{text!r} contains a newline or control character, which "
                             "cannot be written on an #SBATCH line", "remove it")
    if text and _PLAIN.match(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _requeue_line(ex: ExecutionView) -> HeaderLine:
    if requeues_on_node_failure(ex):
        return HeaderLine("requeue", None, "a node failure reruns this job (at most "
                          f"execution.node_failure_retries {ex.node_failure_retries} times)")
    return HeaderLine("no-requeue", None, "resuming is a new job that skips finished tasks")


def log_name(role: str) -> str:
    """A CPU job's log in the folder its header names (%j: its job id)."""
    return f"{role}-%j.log"


def cpu_header(ex: ExecutionView, job: CpuJob) -> list[str]:
    """The header of a run's (or a watch's) CPU job, as text lines; its time within its
    partition's, QOS's and association's limits (cpu_minutes)."""
    name = HeaderLine("job-name", sbatch_value(job.name, "execution.job_name"), job.name_why)
    log = f"{slurm_filename(job.log_dir)}/{log_name(job.role)}"
    minutes, why = cpu_minutes(ex, job)
    return [line.text() for line in cpu_job_lines(ex, name, log, minutes, why,
                                                  job.cpu_why, job.invocation_id,
                                                  cpus=job.cpus)]


def cpu_minutes(ex: ExecutionView, job: CpuJob) -> tuple[int, str]:
    """A CPU job's time limit and why: its own minutes, or the shortest limit its partition
    (execution.cpu_partition), QOS or association sets where that is shorter. Slurm refuses a
    longer --time under a DenyOnLimit QOS and leaves it pending forever under a partition's
    MaxTime, so the job asks for what it may have; sinfo unseen: its own minutes."""
    from hpceval.backends.slurm.partitions import job_place, partition_seen, time_limit

    place = job_place(ex, cpu=True)
    if not partition_seen(place.partition):
        return job.minutes, job.why
    limit = time_limit(place.partition, place.qos, place.account)
    if limit is None or job.minutes <= limit.minutes:
        return job.minutes, job.why
    return limit.minutes, f"{job.why}; {job.minutes} wanted, {limit.what} allows {limit.minutes}"


def cpu_job_lines(ex: ExecutionView, name: HeaderLine, log_file: str, minutes: int, why: str,
                  cpu_why: str, invocation_id: str | None = None, *,
                  cpus: int = 1) -> list[HeaderLine]:
    """The header of a small CPU job beside a run (aggregation, export, a watch's tick, the
    pull job): the run's account, QOS and reservation, its cpu_partition (default: its
    partition); ``cpus`` CPUs (one unless the job's work uses more), no GPU; never requeued.
    A run's own (`invocation_id`) carries its id in the comment, as its model jobs do:
    `hpceval kill` cancels it too."""
    lines = [name]
    partition, partition_key = (ex.cpu_partition, "execution.cpu_partition") \
        if ex.cpu_partition is not None else (ex.partition, "execution.partition")
    for flag, value, key in (("account", ex.account, "execution.account"),
                             ("partition", partition, partition_key),
                             ("qos", ex.qos, "execution.qos"),
                             ("reservation", ex.reservation, "execution.reservation")):
        if value is not None:
            lines.append(HeaderLine(flag, sbatch_value(value, key)))
    return [*lines, HeaderLine("time", str(minutes), why),
            HeaderLine("nodes", "1"), HeaderLine("ntasks", "1"),
            HeaderLine("cpus-per-task", str(cpus), cpu_why),
            HeaderLine("output", sbatch_value(log_file, "execution.output_dir")),
            HeaderLine("no-requeue", None),
            *([HeaderLine("comment", sbatch_value(run_comment(None, invocation_id),
                                                  "execution.sbatch_comment"))]
              if invocation_id else [])]


GPU_FLAGS = ("gpus-per-node", "gres")  # the gpu_request styles that put GPUs in the header
_CPU_FLAGS = frozenset({"cpus-per-task", "cpus-per-gpu"})
_MEM_FLAGS = frozenset({"mem", "mem-per-gpu", "mem-per-cpu"})


def gpu_request(ex: ExecutionView, gpus: int) -> tuple[str, str] | None:
    """How a job of ``ex`` asks for ``gpus`` GPUs per node, as (flag, value): gpus-per-node
    ``[TYPE:]N`` or gres ``gpu:[TYPE:]N`` (execution.gpu_request, gpu_type); None for none.
    The job header and doctor's node job (one GPU) both ask this way."""
    if gpus <= 0 or ex.gpu_request not in GPU_FLAGS:
        return None
    typed = f"{ex.gpu_type}:{gpus}" if ex.gpu_type else str(gpus)
    return (ex.gpu_request, typed if ex.gpu_request == "gpus-per-node" else f"gpu:{typed}")


def _per_gpu_defaults(ex: ExecutionView, *, requested_gpus: bool) -> list[HeaderLine]:
    """CPUs and memory for a GPU job that names neither: without them Slurm gives one CPU and
    DefMemPerCPU (often a few GB) to a whole vLLM server, which then crawls or is OOM-killed."""
    if not requested_gpus:
        return []
    lines = []
    extra = set(ex.sbatch_extra_flags)
    if ex.cpus_per_task is None and ex.cpus_per_gpu is not None and not extra & _CPU_FLAGS:
        lines.append(HeaderLine("cpus-per-gpu", str(ex.cpus_per_gpu),
                                "execution.cpus_per_gpu (cpus_per_task is null)"))
    if ex.mem is None and not extra & _MEM_FLAGS:
        if ex.exclusive:
            lines.append(HeaderLine("mem", "0", "whole nodes: all of their memory"))
        elif ex.mem_per_gpu is not None:
            lines.append(HeaderLine("mem-per-gpu", sbatch_value(ex.mem_per_gpu,
                                                                "execution.mem_per_gpu"),
                                    "execution.mem_per_gpu (mem is null)"))
    return lines


# the header's comments, as they read for a sweep's judge job (its own job, render/judge_job.py)
_JUDGE_WHY = {"nodes": "auxiliary_deployments.<name>.num_nodes: the judge's own nodes",
              "time": "execution.max_walltime within the partition, QOS and association "
                      "limits (execution.walltime where no partition is seen): the stop file "
                      "ends it sooner",
              "no-requeue": "a resumed sweep submits a new judge job"}


def job_header(spec: RunView, ctx: JobView, log_dir: str, nodes: int,
               role: Role = Role.MAIN) -> list[str]:
    """header_lines as text lines, a judge job's (role JUDGE) with its own comments."""
    lines = header_lines(spec, ctx, log_dir, nodes)
    if role is Role.JUDGE:
        lines = [dataclasses.replace(line, why=_JUDGE_WHY.get(line.flag, line.why))
                 for line in lines]
    return [line.text() for line in lines]


def header_lines(spec: RunView, ctx: JobView, log_dir: str, nodes: int) -> list[HeaderLine]:
    """The job's header; `nodes` is the allocation's node count (config.aux_layout.job_nodes:
    the model's nodes and its in-job judges', a rule of the config layer above)."""
    ex = spec.execution
    lines: list[HeaderLine] = []

    def add(flag: str, value: Any, key: str, why: str = "") -> None:
        if value is not None:
            lines.append(HeaderLine(flag, sbatch_value(value, key), why))

    # The default name comes from the model key; characters sbatch cannot take are dropped.
    default_name = "hpceval-" + _BAD.sub("_", ctx.model_key)
    add("job-name", ex.job_name or default_name, "execution.job_name")
    add("account", ex.account, "execution.account")
    add("partition", ex.partition, "execution.partition")
    add("qos", ex.qos, "execution.qos")
    add("reservation", ex.reservation, "execution.reservation")
    add("constraint", ex.constraint, "execution.constraint")
    add("time", ex.walltime, "execution.walltime")
    add("nodes", nodes, "execution.nodes", "one allocation serves every task of this model"
        if nodes == ex.nodes else f"the model's {ex.nodes} and its judges' {nodes - ex.nodes}")
    lines.append(HeaderLine("ntasks-per-node", "1", "servers and tasks start their own steps"))
    gpu = gpu_request(ex, ex.gpus_per_node)
    if gpu is not None:
        add(*gpu, "execution.gpu_type")
    add("cpus-per-task", ex.cpus_per_task, "execution.cpus_per_task")
    add("mem", ex.mem, "execution.mem")
    lines += _per_gpu_defaults(ex, requested_gpus=gpu is not None)
    if ex.exclusive:
        lines.append(HeaderLine("exclusive", None, "whole nodes: no other job shares them"))
    add("comment", run_comment(ex.sbatch_comment, ctx.invocation_id), "execution.sbatch_comment",
        "the run's id: hpceval kill cancels only jobs that carry it")
    if ctx.array is not None:
        limit = ctx.array.parallelism or ex.array_parallelism
        spec_text = f"0-{ctx.array.size - 1}" + (f"%{limit}" if limit else "")
        lines.append(HeaderLine("array", spec_text, "one element per sweep entry"))
    pattern = log_file("%A", "%a") if ctx.array else log_file("%j")
    out = sbatch_value(f"{slurm_filename(log_dir)}/{pattern}", "execution.output_dir")
    lines.append(HeaderLine("output", out))
    lines.append(HeaderLine("error", out, "one log: errors next to what led to them"))
    lines.append(HeaderLine("open-mode", "append", "a rerun under this id keeps its first lines"))
    lines.append(HeaderLine("signal", f"B:USR1@{ex.signal_seconds}",
                            "warn the script before the walltime ends"))
    if "requeue" not in ex.sbatch_extra_flags:  # else the site's own choice, written below
        lines.append(_requeue_line(ex))
    for flag, value in ex.sbatch_extra_flags.items():
        key = f"execution.sbatch_extra_flags.{flag}"
        if not SBATCH_FLAG.match(flag):
            raise ConfigError(ConfigIssue(key, "is not an sbatch flag name", "e.g. mail-type"))
        if value is True:
            lines.append(HeaderLine(flag, None))
        elif value is not None and value is not False:
            add(flag, value, key)
    return lines
