"""Execution backends: the one seam between the controller and where jobs run.

`backend_for` is the one place that maps a run's execution type to its backend; nothing else
in hpceval asks whether a run is local or on Slurm.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpceval.backends.base import (
    Backend,
    BackendFiles,
    CancelReport,
    CpuJob,
    JobEntry,
    JobInfo,
    JobQuery,
    JobRequest,
    JobUsage,
    UsageQuery,
)
from hpceval.backends.views import ExecutionView

if TYPE_CHECKING:
    from hpceval.backends.slurm.client import SlurmClient
    from hpceval.backends.slurm.poller import SacctPoller

BACKENDS = ("slurm", "local")  # execution.type values (NeMo Evaluator's names)


def backend_for(kind: str, *, client: SlurmClient | None = None,
                poller: SacctPoller | None = None, min_interval_s: float = 2.0) -> Backend:
    """The backend of an execution type (a run's kind in run.json and jobs.json).

    `client`, `poller` and `min_interval_s` are read by the Slurm backend only (a fake client
    in tests; the poller's rate limit); the local backend needs no settings.
    """
    if kind == "slurm":
        from hpceval.backends.slurm.backend import SlurmBackend

        return SlurmBackend(client, poller=poller, min_interval_s=min_interval_s)
    if kind == "local":
        from hpceval.backends.local import LocalBackend

        return LocalBackend()
    raise ValueError(f"unknown execution type {kind!r}; known: {', '.join(BACKENDS)}")


def resumes_itself(ex: ExecutionView) -> bool:
    """execution.auto_resume where the backend submits successors (slurm; not local)."""
    return ex.auto_resume and backend_for(ex.type).resubmits_itself


def requeues_on_node_failure(ex: ExecutionView) -> bool:
    """A node failure kills the batch script with its node (SIGKILL: no trap runs), so no
    successor can be submitted from inside; the scheduler reruns the job instead (Slurm's
    --requeue: only for failures that are not the job's own, a node failure or an admin's
    requeue; not after a non-zero exit, a timeout, a cancel or PreemptMode=CANCEL)."""
    return resumes_itself(ex) and ex.node_failure_retries > 0


__all__ = ["BACKENDS", "Backend", "BackendFiles", "CancelReport", "CpuJob", "JobEntry", "JobInfo",
           "JobQuery", "JobRequest", "JobUsage", "UsageQuery", "backend_for",
           "requeues_on_node_failure", "resumes_itself"]
