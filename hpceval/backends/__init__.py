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
    JobEntry,
    JobInfo,
    JobQuery,
    JobRequest,
    JobUsage,
    UsageQuery,
)

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


__all__ = ["BACKENDS", "Backend", "BackendFiles", "CancelReport", "JobEntry", "JobInfo", "JobQuery",
           "JobRequest", "JobUsage", "UsageQuery", "backend_for"]
