"""A checkpoint watch's tick job script (templates/watch-tick.sbatch.j2). Pure, like render_job.

The tick is a small CPU job: the run's partition, account, QOS and reservation, one CPU, a few
minutes; its name is unique to the watch, which is what `--dependency=singleton` keys on.
"""

from __future__ import annotations

from hpceval.backends.slurm.formats import slurm_filename
from hpceval.backends.slurm.header import HeaderLine, cpu_job_lines, sbatch_value
from hpceval.config import ResolvedConfig
from hpceval.contract import WATCH_LOG_DIR
from hpceval.render.context import backend_view
from hpceval.render.quoting import ShellCode, shipped_environment

TICK_TEMPLATE = "watch-tick.sbatch.j2"
TICK_MINUTES = 10  # a tick lists folders and submits a few jobs


def tick_job_name(watch_id: str) -> str:
    """The name every tick of one watch shares (singleton: one of them at a time)."""
    return f"hpceval-{watch_id}"


def render_tick(resolved: ResolvedConfig, *, watch_dir: str, watch_id: str, python: str,
                checkpoints: str, interval_s: int) -> str:
    name = HeaderLine("job-name", sbatch_value(tick_job_name(watch_id), "execution.job_name"),
                      "the same for every tick of this watch")
    lines = cpu_job_lines(resolved.spec.execution, name,
                          f"{slurm_filename(watch_dir)}/{WATCH_LOG_DIR}/tick-%j.log",
                          TICK_MINUTES, "lists folders, submits a few jobs", "no GPU")
    return shipped_environment().get_template(TICK_TEMPLATE).render(
        header=[ShellCode(line.text()) for line in lines], watch_id=watch_id,
        backend=backend_view(resolved.spec.execution.type),
        checkpoints=checkpoints, interval_s=interval_s, python=python, watch_dir=watch_dir)
