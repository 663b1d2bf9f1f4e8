"""The export step after a run (``export.destinations``): ``python -m hpceval.results.autoexport``.

On Slurm it is its own CPU job, queued to start after the main job has ended, beside the
sweep's aggregation job; the local runner calls it after the last model. A main job stopped by
its walltime submits a successor (auto-resume) and ends, which releases this job too early: so
before exporting, the job looks for successors it has not waited for yet (the run directory's
successor list) and, if there are any, submits itself again after them and exits. Exporting is
idempotent (``hpceval export``), so a re-run, or a later manual export, changes nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from hpceval.contract import EXPORT_DIR, EXPORT_WAITED_FILE, SUCCESSORS_FILE
from hpceval.records import Role

# the options this module parses are written by render (re-exported for older callers)
from hpceval.render.export_args import export_arguments as export_arguments


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


def wait_for_successors(run_dir: Path, script: Path, client: object | None = None, *,
                        waited_file: str = EXPORT_WAITED_FILE, role: Role = Role.EXPORT
                        ) -> str | None:
    """Submit ``script`` again after the unwaited successors; returns its job id, or None
    when the run has none (then export now). A sweep's aggregation job with a judge does the
    same (``waited_file`` aggregate.waited, ``role`` aggregate): the judge must outlive them."""
    todo = unwaited_successors(run_dir, waited_file)
    if not todo:
        return None
    from hpceval.backends import backend_for
    from hpceval.errors import HpcevalError
    from hpceval.records import read_run
    from hpceval.runs.jobs import append_jobs, read_jobs

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


def run_exports(run_dir: Path, args: argparse.Namespace) -> int:
    from hpceval.results import export as ex
    from hpceval.results.table import results_frame

    frame = results_frame([run_dir])
    failed = 0
    for dest in args.dest:
        try:
            if dest == "local":
                written = ex.export_local(frame, Path(args.local_dir), args.local_format)
                print(f"local: {len(written)} file(s) in {args.local_dir} ({len(frame)} rows)")
            elif dest == "mlflow":
                report = ex.export_mlflow(frame, experiment=args.mlflow_experiment,
                                          tracking_uri=args.mlflow_tracking_uri)
                print(f"mlflow: {report.created} run(s) created, {report.updated} updated, "
                      f"{report.unchanged} unchanged")
            else:
                os.environ.setdefault("WANDB_DIR", str(run_dir / EXPORT_DIR))
                (run_dir / EXPORT_DIR).mkdir(exist_ok=True)
                report = ex.export_wandb(frame, project=args.wandb_project,
                                         offline=not args.wandb_online)
                print(f"wandb: {report.created} run(s) written")
        except Exception as exc:
            failed += 1         # destination must not stop the others, and says how to retry
            print(f"{dest}: export failed: {exc} (retry: hpceval export {run_dir} --dest "
                  f"{dest})", file=sys.stderr)
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    return main_with(argv, None)


def main_with(argv: Sequence[str] | None, client: object | None) -> int:
    """main, with the backend's command client that resubmits the job (tests pass a fake;
    opaque here: only the backend reads it)."""
    parser = argparse.ArgumentParser(prog="python -m hpceval.results.autoexport")
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--resubmit", type=Path,
                        help="this job's script: wait for auto-resume successors first")
    parser.add_argument("--dest", action="append", choices=["local", "mlflow", "wandb"],
                        required=True)
    parser.add_argument("--local-dir")
    parser.add_argument("--local-format", choices=["json", "csv"], default="json")
    parser.add_argument("--mlflow-tracking-uri")
    parser.add_argument("--mlflow-experiment", default="hpceval")
    parser.add_argument("--wandb-project", default="hpceval")
    parser.add_argument("--wandb-online", action="store_true")
    args = parser.parse_args(argv)
    if args.resubmit is not None:
        job = wait_for_successors(args.run_dir, args.resubmit, client)
        if job is not None:
            print(f"the run continues in a successor job: export waits for it (job {job})")
            return 0
    return run_exports(args.run_dir, args)


if __name__ == "__main__":
    sys.exit(main())
