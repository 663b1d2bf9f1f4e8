"""What the renderer needs besides the resolved config: where and as what this job runs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from hpceval.backends import Backend, backend_for


@dataclass(frozen=True)
class ArraySpec:
    """An array job (`--array=0-<size-1>%<parallelism>`), one element per sweep entry."""

    size: int
    parallelism: int | None = None

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError(f"an array job needs at least one element, got size={self.size}")
        if self.parallelism is not None and self.parallelism < 1:
            raise ValueError(f"array parallelism must be >= 1, got {self.parallelism}")


@dataclass(frozen=True)
class JobContext:
    """Per-submission facts. ``python`` runs ``hpceval.job`` on the nodes (shared storage)."""

    run_dir: PurePosixPath | str
    invocation_id: str
    model_key: str
    python: str
    array: ArraySpec | None = None
    hpceval_version: str = ""
    # Where this script lies on shared storage, for the successor job that auto-resume submits
    # (Slurm runs a spooled copy, so the script cannot find itself); default run_dir/job.sbatch.
    script_path: str | None = None

    @property
    def run_dir_text(self) -> str:
        return str(self.run_dir)


def job_backend(kind: str) -> Backend:
    """The backend of execution type ``kind``: render's one lookup. Its dialect (the header
    lines, log names, in-job partials) is the backend's; render writes what it is given."""
    return backend_for(kind)


def backend_view(kind: str) -> dict[str, str | bool]:
    """The `backend` every template gets: the folder of templates/ with the in-job dialect of
    the execution type `kind` (Backend.partials). The neutral templates include its env,
    discover, launch, successor, preempted and detach partials by that name and read only
    the variables env.j2 sets (HPCEVAL_JOB_ID, HPCEVAL_NODELIST, ...), never the scheduler's.
    ``pulls_ahead``: the run's pull job pulled the servers' images before this job started
    (Backend.pulls_ahead); the job only checks they are there. ``name``: its execution type,
    for the in-job commands that ask the backend themselves (the cache compaction)."""
    backend = job_backend(kind)
    return {"name": backend.name, "partials": backend.partials,
            "pulls_ahead": backend.pulls_ahead}
