"""The run's pull job: one CPU job that pulls the docker:// images nothing staged. Pure.

A server image that ``hpceval stage`` did not put in ``execution.image_dir``, or a harness's
docker:// image, is pulled once for the run into its ``images/`` folder and run as that file.
Where the backend queues jobs after others (Backend.pulls_ahead: Slurm), that pull is a CPU job
of its own (templates/pull.sbatch.j2) that every job holding GPUs waits for, so no GPU sits idle
during a pull of tens of GB; those jobs only check that the files are there
(templates/deployment/_pull.j2). The images are the same ones the jobs run: both come from
``image_pull`` (render/steps.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hpceval.backends import backend_for
from hpceval.config import ResolvedConfig
from hpceval.config.judges import judge_config, sweep_scoped
from hpceval.contract import JOB_FILES, SERVER_IMAGES_DIR
from hpceval.render.context import JobContext, backend_view
from hpceval.render.deployments import server_pull
from hpceval.render.quoting import shipped_environment
from hpceval.render.servers import auxiliary_served, model_served
from hpceval.render.steps import harness_pulls

PULL_TEMPLATE = "pull.sbatch.j2"
# A vLLM image is tens of GB: its pull and conversion takes minutes to most of an hour.
PULL_MINUTES = 60
# The conversion (apptainer pull's and enroot import's mksquashfs) compresses on every CPU the
# job is given, so one CPU made it the slowest part of the pull. Four is a few times faster and
# fits any node (the dev cluster's have 4 CPUs), and DefMemPerCPU grows with it for the layers
# held in memory. A constant, not a profile key: no site has needed another number, and the
# partition's CPUs per node are not known at render time (sinfo is asked for MaxTime only).
PULL_CPUS = 4


def pull_dir(ctx: JobContext) -> str:
    """Where a run's pulled images go: its images/ folder, on the shared storage of the run."""
    return f"{ctx.run_dir_text}/{SERVER_IMAGES_DIR}"


def run_pulls(runs: Sequence[ResolvedConfig], ctx: JobContext) -> list[dict[str, Any]]:
    """Every image a job of the run pulls (each file once): the models' servers and harnesses,
    the judges served in their jobs, and a sweep's judge jobs (scope: sweep)."""
    where = pull_dir(ctx)
    judges = [judge_config(runs[0], name, ctx.invocation_id)
              for name in sweep_scoped(runs[0].spec)] if len(runs) > 1 else []
    pulls: dict[str, dict[str, Any]] = {}
    seen: set[tuple[Any, ...]] = set()
    for resolved in (*runs, *judges):
        ex = resolved.spec.execution
        for served in (model_served(resolved), *auxiliary_served(resolved).values()):
            # a sweep's models mostly share their images: ask the runtime once per image
            key = (served.dep.image, served.dep.serves_from_image, ex.container_runtime,
                   ex.image_dir)
            if key in seen:
                continue
            seen.add(key)
            pull = server_pull(resolved, served, where)
            if pull is not None:
                pulls.setdefault(pull["file"], pull)
        for pull in harness_pulls(resolved, where):
            pulls.setdefault(pull["file"], pull)
    return list(pulls.values())


@dataclass(frozen=True)
class PullJob:
    script: str
    files: tuple[str, ...]  # the image files it writes (resume submits it again if one lacks)


def render_pull(runs: Sequence[ResolvedConfig], ctx: JobContext) -> PullJob | None:
    """The pull job; None when nothing is to be pulled, or when the run's backend has each
    job pull for itself (it holds nothing that others wait for)."""
    from hpceval.render.job import site_context
    from hpceval.render.sweep import cpu_job_header

    first = runs[0]
    if not backend_for(first.spec.execution.type).pulls_ahead:
        return None
    pulls = run_pulls(runs, ctx)
    if not pulls:
        return None
    script = shipped_environment().get_template(PULL_TEMPLATE).render(
        header=cpu_job_header(first, ctx, "pull", PULL_MINUTES,
                              "pulling and converting an image of tens of GB",
                              "mksquashfs converts on every CPU given; no GPU: the run's jobs "
                              "that hold GPUs wait for this one", cpus=PULL_CPUS),
        invocation_id=ctx.invocation_id, run_dir=ctx.run_dir_text, pulls=pulls,
        backend=backend_view(first.spec.execution.type), files=JOB_FILES, **site_context(first))
    return PullJob(script, tuple(p["file"] for p in pulls))
