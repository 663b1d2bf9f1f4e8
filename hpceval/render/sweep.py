"""Sweeps: N models, ONE array job (Slurm's; the local runner runs the elements in turn).
Pure, like render_job.

The array's script is a short dispatcher (templates/sweep.sbatch.j2): the backend's header
every model's own job would carry (Backend.header; none for the local backend), plus a
`case "$HPCEVAL_ARRAY_INDEX"` (the backend's env.j2) that execs ``models/<key>/job.sh``, the
full per-model script from ``render_job``. Element
scripts carry their own (single-job) header too: under the dispatcher it is only comments, and
it lets an admin submit one element by hand. A small CPU-only aggregation script, submitted
with ``--dependency=afterany:<array>``, writes the sweep's results table when every element
ended.
An auxiliary deployment with ``scope: sweep`` (a judge) is one job of its own that the array
starts after (render/judge_job.py); the aggregation script ends it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from hpceval._version import __version__
from hpceval.backends import CpuJob
from hpceval.config import ResolvedConfig
from hpceval.config.aux_layout import job_nodes
from hpceval.config.errors import ConfigError
from hpceval.contract import JOB_FILES, LOG_DIR, element_script
from hpceval.render.context import ArraySpec, JobContext, backend_view, job_backend
from hpceval.render.job import render_job
from hpceval.render.judge_job import render_judge_job, sweep_judges
from hpceval.render.quoting import ShellCode, shipped_environment

SWEEP_TEMPLATE = "sweep.sbatch.j2"
AGGREGATE_TEMPLATE = "aggregate.sbatch.j2"
AGGREGATE_MINUTES = 15
EXPORT_TEMPLATE = "export.sbatch.j2"
EXPORT_MINUTES = 30


@dataclass(frozen=True)
class SweepScripts:
    dispatcher: str  # what the scheduler receives
    elements: dict[str, str]  # model key -> its job script (models/<key>/job.sh)
    aggregate: str  # the dependent aggregation job's script
    judges: dict[str, str] = field(default_factory=dict)  # scope sweep: name -> judge job script


def sweep_header(models: Sequence[tuple[str, ResolvedConfig]], ctx: JobContext,
                 log_dir: str) -> list[str]:
    """The array header (the backend's lines); ConfigError if any model would need a
    different one."""
    first_key, first = models[0]
    backend = job_backend(first.spec.execution.type)
    texts = backend.header(first.spec, ctx, log_dir, job_nodes(first.spec))
    for key, resolved in models[1:]:
        other = backend.header(resolved.spec, ctx, log_dir, job_nodes(resolved.spec))
        if other != texts:
            pairs = zip(texts, other, strict=False)
            diff = next((b for a, b in pairs if a != b), "(a different length)")
            raise ConfigError.at(f"models.{key}", f"needs the header line {diff!r}, which "
                                 f"differs from model {first_key!r}'s; one array job has one "
                                 "header", "keep per-model settings out of execution")
    return texts


def render_sweep(models: Sequence[tuple[str, ResolvedConfig]], ctx: JobContext) -> SweepScripts:
    """Dispatcher + element scripts for ``models`` ((key, config) in array index order)."""
    if len(models) < 1:
        raise ValueError("a sweep needs at least one model")
    keys = [key for key, _ in models]
    if len(set(keys)) != len(keys):
        raise ValueError(f"model keys must be unique: {keys}")
    ex = models[0][1].spec.execution
    array_ctx = replace(ctx, model_key="sweep",
                        array=ArraySpec(len(models), ex.array_parallelism))
    run_dir = ctx.run_dir_text
    header = sweep_header(models, array_ctx, f"{run_dir}/{LOG_DIR}")
    elements = {key: render_job(resolved, _element_context(ctx, key))
                for key, resolved in models}
    views = [{"index": i, "key": key, "summary": _summary(resolved)}
             for i, (key, resolved) in enumerate(models)]
    version = ctx.hpceval_version or __version__
    dispatcher = shipped_environment().get_template(SWEEP_TEMPLATE).render(
        header=[ShellCode(line) for line in header], models=views,
        backend=backend_view(ex.type),
        job={"run_dir": run_dir, "invocation_id": ctx.invocation_id, "version": version},
        files=JOB_FILES)
    judges = {name: render_judge_job(models[0][1], name, ctx) for name in sweep_judges(models)}
    return SweepScripts(dispatcher, elements, render_aggregate(models[0][1], ctx, list(judges)),
                        judges)


def _element_context(ctx: JobContext, key: str) -> JobContext:
    """An element runs as models/<key>/job.sh; a successor it submits (auto-resume) is that
    script as a single job, not the whole array."""
    return replace(ctx, model_key=key, array=None,
                   script_path=f"{ctx.run_dir_text}/{element_script(key)}")


def render_aggregate(resolved: ResolvedConfig, ctx: JobContext,
                     judges: Sequence[str] = ()) -> str:
    """The dependent CPU job: same partition/account/QOS as the sweep, one CPU, 15 minutes.
    It also ends the sweep's judge jobs (``judges``: their names) by writing their stop file."""
    from hpceval.contract import AGGREGATE_SCRIPT, AUX_STOP_FILE, WAITS_FOR_SUCCESSORS, aux_folder

    return shipped_environment().get_template(AGGREGATE_TEMPLATE).render(
        header=cpu_job_header(resolved, ctx, "aggregate", AGGREGATE_MINUTES,
                              "reading result files is quick"),
        invocation_id=ctx.invocation_id, python=ctx.python, run_dir=ctx.run_dir_text,
        stops=[f"{ctx.run_dir_text}/{aux_folder(name)}/{AUX_STOP_FILE}" for name in judges],
        script=f"{ctx.run_dir_text}/{AGGREGATE_SCRIPT}", waits_rc=WAITS_FOR_SUCCESSORS)


def render_export(resolved: ResolvedConfig, ctx: JobContext) -> str:
    """export.destinations: the dependent CPU job that sends the results (any backend's run
    directory gets it; the Slurm backend submits it, the local runner calls its module)."""
    from hpceval.contract import EXPORT_SCRIPT
    from hpceval.render.export_args import export_arguments

    spec = resolved.spec.export
    return shipped_environment().get_template(EXPORT_TEMPLATE).render(
        header=cpu_job_header(resolved, ctx, "export", EXPORT_MINUTES,
                              "result files to a folder or a tracking server"),
        invocation_id=ctx.invocation_id, python=ctx.python, run_dir=ctx.run_dir_text,
        script=f"{ctx.run_dir_text}/{EXPORT_SCRIPT}", destinations=spec.destinations,
        args=export_arguments(spec, ctx.run_dir_text))


def cpu_job_header(resolved: ResolvedConfig, ctx: JobContext, role: str, minutes: int,
                   why: str, cpu_why: str = "no GPU: only result files are read", *,
                   cpus: int = 1) -> list[ShellCode]:
    """The header of a run's CPU job (the backend's lines): same partition/account/QOS/
    reservation; ``cpus`` CPUs; its log in the run's logs/."""
    ex = resolved.spec.execution
    job = CpuJob(role, f"hpceval-{role}-{ctx.invocation_id}", f"{ctx.run_dir_text}/{LOG_DIR}",
                 minutes, why, cpu_why, ctx.invocation_id, cpus=cpus)
    return [ShellCode(line) for line in job_backend(ex.type).cpu_header(ex, job)]


def _summary(resolved: ResolvedConfig) -> str:
    dep = resolved.spec.deployment
    source = dep.checkpoint_path or dep.hf_model_handle or resolved.spec.target.api_endpoint.url
    return f"{dep.type} deployment of {source or resolved.spec.served_name}"
