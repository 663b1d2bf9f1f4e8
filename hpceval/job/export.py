"""The export step after a run (``export.destinations``): ``python -m hpceval.job export``.

On Slurm it is its own CPU job, queued to start after the main job has ended, beside the
sweep's aggregation job; the local runner calls it after the last model. It first waits for
the run's auto-resume successors (hpceval.runs.successors). Exporting is idempotent
(``hpceval export``), so a re-run, or a later manual export, changes nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from hpceval.backends import SchedulerClient
from hpceval.contract import EXPORT_DIR
from hpceval.runs.successors import wait_for_successors


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


def main_with(argv: Sequence[str] | None, client: SchedulerClient | None) -> int:
    """main, with the backend's command client that resubmits the job (tests pass a fake)."""
    parser = argparse.ArgumentParser(prog="python -m hpceval.job export")
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
