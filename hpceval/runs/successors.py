"""Waiting for a run's auto-resume successors: the dependent jobs (export, a sweep's aggregation
with a judge) were queued after the main job, which a walltime stop ends early while its work
goes on in a successor. Before they act, they look for successors they have not waited for
yet (the run directory's successor list) and, if there are any, queue themselves again after
them and exit.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hpceval.backends import SchedulerClient, backend_for
from hpceval.contract import EXPORT_WAITED_FILE, SUCCESSORS_FILE
from hpceval.errors import HpcevalError
from hpceval.records import Role, read_run
from hpceval.runs.jobs import append_jobs, read_jobs


def _ids(path: Path) -> list[str]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    return [line.split()[0] for line in lines if line.strip()]


def unwaited_successors(run_dir: Path, waited_file: str = EXPORT_WAITED_FILE) -> list[str]:
    """Successor jobs (auto-resume) this export (or aggregation) has not waited for yet."""
    waited = set(_ids(run_dir / waited_file))
    return [i for i in dict.fromkeys(_ids(run_dir / SUCCESSORS_FILE)) if i not in waited]


def wait_for_successors(run_dir: Path, script: Path, client: SchedulerClient | None = None, *,
                        waited_file: str = EXPORT_WAITED_FILE, role: Role = Role.EXPORT
                        ) -> str | None:
    """Submit ``script`` again after the unwaited successors; returns its job id, or None
    when the run has none (then export now). A sweep's aggregation job with a judge does the
    same (``waited_file`` aggregate.waited, ``role`` aggregate): the judge must outlive them."""
    todo = unwaited_successors(run_dir, waited_file)
    if not todo:
        return None
    # the run's backend, as `hpceval resume` finds it (run.json, else jobs.json)
    kind = read_run(run_dir).kind or read_jobs(run_dir).kind
    try:
        entry = backend_for(kind, client=client).resubmit_after(run_dir, script, todo,
                                                                 role=role)
    except HpcevalError as exc:  # e.g. a successor the scheduler forgot: it ended long ago
        print(f"not waiting for job(s) {', '.join(todo)}: {exc}; going on now", file=sys.stderr)
        return None
    with (run_dir / waited_file).open("a", encoding="utf-8") as fh:
        fh.write("".join(f"{i}\n" for i in todo))
    # Into the run's chain, so `hpceval kill` cancels it too (status follows main jobs only).
    append_jobs(run_dir, kind, [entry])
    return entry.id
