"""The sweep's aggregation step: ``python -m hpceval.job aggregate --run-dir DIR`` writes
DIR/results.csv (and .parquet) from every model's finished tasks (hpceval.results.table). With
``--resubmit`` it first waits for the run's auto-resume successors (a sweep judge must outlive
them): it queues itself again after them and exits WAITS_FOR_SUCCESSORS.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from hpceval.contract import AGGREGATE_WAITED_FILE, WAITS_FOR_SUCCESSORS
from hpceval.records import Role
from hpceval.results.table import aggregate
from hpceval.runs.successors import wait_for_successors


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hpceval.job aggregate",
                                     description="write RUN_DIR/results.csv (+ .parquet)")
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--resubmit", type=Path,
                     help="this job's script: if elements continue in auto-resume successors, "
                          f"submit it again after them and exit {WAITS_FOR_SUCCESSORS}")
    args = parser.parse_args(argv)
    if args.resubmit is not None:
        job = wait_for_successors(args.run_dir, args.resubmit,
                                  waited_file=AGGREGATE_WAITED_FILE, role=Role.AGGREGATE)
        if job is not None:
            print(f"the sweep continues in successor jobs: aggregation waits for them (job {job})")
            return WAITS_FOR_SUCCESSORS
    frame = aggregate(args.run_dir)
    models = frame["model"].nunique() if not frame.empty else 0
    print(f"aggregate: {len(frame)} metric rows from {models} model(s) -> "
          f"{args.run_dir / 'results.csv'}")
    return 0
