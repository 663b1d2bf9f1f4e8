"""A checkpoint watch's tick job script (templates/watch-tick.sbatch.j2). Pure, like render_job.

The tick is a small CPU job: the run's partition, account, QOS and reservation, one CPU, a few
minutes; its name is unique to the watch, which is what `--dependency=singleton` keys on.
"""

from __future__ import annotations

from hpceval.backends import CpuJob
from hpceval.config import ResolvedConfig
from hpceval.contract import WATCH_LOG_DIR
from hpceval.render.context import backend_view, job_backend
from hpceval.render.quoting import ShellCode, shipped_environment

TICK_TEMPLATE = "watch-tick.sbatch.j2"
TICK_MINUTES = 10  # a tick lists folders and submits a few jobs


def tick_job_name(watch_id: str) -> str:
    """The name every tick of one watch shares (singleton: one of them at a time)."""
    return f"hpceval-{watch_id}"


def render_tick(resolved: ResolvedConfig, *, watch_dir: str, watch_id: str, python: str,
                checkpoints: str, interval_s: int) -> str:
    ex = resolved.spec.execution
    job = CpuJob("tick", tick_job_name(watch_id), f"{watch_dir}/{WATCH_LOG_DIR}", TICK_MINUTES,
                 "lists folders, submits a few jobs", "no GPU",
                 name_why="the same for every tick of this watch")
    return shipped_environment().get_template(TICK_TEMPLATE).render(
        header=[ShellCode(line) for line in job_backend(ex.type).cpu_header(ex, job)],
        watch_id=watch_id,
        backend=backend_view(resolved.spec.execution.type),
        checkpoints=checkpoints, interval_s=interval_s, python=python, watch_dir=watch_dir)
