"""Submit a prepared run: write its directory, sbatch the script, record job ids."""

from __future__ import annotations

from hpceval.runs.registry import register_run
from hpceval.runs.rundir import JOB_SCRIPT, PreparedRun, record_jobs, write_run
from hpceval.slurm.client import CommandSlurmClient, SlurmClient


def submit_prepared(run: PreparedRun, client: SlurmClient | None = None) -> str:
    write_run(run)
    slurm = client or CommandSlurmClient()
    job_id = slurm.submit(run.run_dir / JOB_SCRIPT)
    record_jobs(run.run_dir, [job_id])
    register_run(run.run_dir.parent, {"invocation_id": run.invocation_id,
                                      "run_dir": str(run.run_dir), "jobs": [job_id]})
    return job_id
