"""Execution backends: the one seam between the controller and where jobs run.

`backend_for` is the one place that maps a run's execution type to its backend; nothing else
in hpceval asks whether a run is local or on Slurm.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hpceval.backends.base import (
    Backend,
    BackendFiles,
    BackendSettings,
    CancelReport,
    CpuJob,
    JobEntry,
    JobInfo,
    JobQuery,
    JobRequest,
    JobUsage,
    SchedulerClient,
    UsageQuery,
)
from hpceval.backends.views import ExecutionView
from hpceval.registry import Registry

# execution.type values (NeMo Evaluator's names): each backend's factory, imported only when its
# name is asked for; another installed package adds one by a `hpceval.backends` entry point.
BACKENDS: Registry[Callable[[BackendSettings], Backend]] = Registry(
    "execution type", "hpceval.backends", lazy={
        "slurm": "hpceval.backends.slurm.backend:SlurmBackend.from_settings",
        "local": "hpceval.backends.local:LocalBackend.from_settings",
    })


def backend_for(kind: str, *, client: SchedulerClient | None = None, poller: Any = None,
                min_interval_s: float = 2.0) -> Backend:
    """The backend of an execution type (a run's kind in run.json and jobs.json).

    The settings go to every backend, which reads its own: the Slurm one its client (a fake in
    tests), its sacct poller and the poller's rate limit; the local one none.
    """
    return BACKENDS.get(kind)(BackendSettings(client, poller, min_interval_s))


def resumes_itself(ex: ExecutionView) -> bool:
    """execution.auto_resume where the backend submits successors (slurm; not local)."""
    return ex.auto_resume and backend_for(ex.type).resubmits_itself


def requeues_on_node_failure(ex: ExecutionView) -> bool:
    """A node failure kills the batch script with its node (SIGKILL: no trap runs), so no
    successor can be submitted from inside; the scheduler reruns the job instead (Slurm's
    --requeue: only for failures that are not the job's own, a node failure or an admin's
    requeue; not after a non-zero exit, a timeout, a cancel or PreemptMode=CANCEL)."""
    return resumes_itself(ex) and ex.node_failure_retries > 0


__all__ = [
    "BACKENDS",
    "Backend",
    "BackendFiles",
    "BackendSettings",
    "CancelReport",
    "CpuJob",
    "JobEntry",
    "JobInfo",
    "JobQuery",
    "JobRequest",
    "JobUsage",
    "SchedulerClient",
    "UsageQuery",
    "backend_for",
    "requeues_on_node_failure",
    "resumes_itself",
]
