"""Sweep submit time at 1,000 and 10,000 models, against hpceval before the fast paths.

    .venv/bin/python benchmarks/sweep_submit.py [--sizes 1000,10000] [--baseline-ref REF]
        [--baseline-sizes 1000,10000] [--quick]

Each figure is one `hpceval submit` of a sweep through its own code path, in a fresh process:
load and check the run file (`load_run`), render and write the run directory (`create_run`),
submit and record (`submit_prepared`). The run file is the same template for every model with
a different name (a checkpoint sweep's shape), two tasks each. A sweep of at most 1,001 models
is submitted for real, to the dev cluster with `sbatch --hold` (cancelled at once); a larger one
exceeds the dev cluster's MaxArraySize (1001), so its submit stops at the sbatch call (a client
that records the call): everything hpceval itself does is timed.

Baseline, in the same run: the same steps with hpceval as it was at --baseline-ref (default
3025bc6, main before issue 22), taken with `git archive` into a temporary folder. `hpceval
status` of such a sweep stays one sacct call: it is one array job (benchmarks/status_refresh.py
counts the calls). The baseline runs at each of --baseline-sizes (default 1,000 only: at 10,000
models it takes many minutes on its own and ran past run_all's time limit once). With
more than one size, a row gives the largest sweep's time as a ratio to the smallest's, both
measured in this run (linear scaling: the ratio of the sizes). Takes about 1 minute on the 2-core
dev machine (40 s measured at load 1-3), under one with --quick (1,000 only).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from report_json import ROOT, add_json_option, bench_workdir, command_line, row, write_result

CHILD = Path(__file__).resolve().with_name("sweep_submit_child.py")
TARGETS = {1000: 3.0, 10000: 30.0}  # seconds, issue 22
DEFAULT_REF = "3025bc6"


def measure(size: int, source: Path, work: Path) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(source))
    out = subprocess.run(
        [sys.executable, str(CHILD), str(size), str(work)],
        env=env, cwd=source, capture_output=True, text=True, timeout=1800, check=False)
    if out.returncode != 0:
        raise SystemExit(f"submit of {size} models with {source} failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if not str(result["hpceval"]).startswith(str(source)):
        raise SystemExit(f"the child imported {result['hpceval']}, not hpceval from {source}")
    return result


def baseline_tree(ref: str, into: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "hpceval", "templates",
                              "site-configs"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--baseline-ref", default=DEFAULT_REF)
    parser.add_argument("--baseline-sizes", default="1000",
                        help="sizes the baseline is measured at, of --sizes (default 1000)")
    parser.add_argument("--quick", action="store_true", help="1,000 models only")
    add_json_option(parser)
    args = parser.parse_args()
    sizes = [1000] if args.quick else sorted({int(s) for s in args.sizes.split(",") if s})
    baseline_sizes = {int(s) for s in args.baseline_sizes.split(",") if s}
    totals: dict[int, float] = {}
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    with bench_workdir("hpceval-sweep-submit-") as work, \
            tempfile.TemporaryDirectory(prefix="hpceval-baseline-") as old:
        base = baseline_tree(args.baseline_ref, Path(old))
        print("| models | hpceval s | load | write | submit | baseline s | ratio | sbatch |")
        print("|---:|---:|---:|---:|---:|---:|---:|---|")
        for size in sizes:
            now = measure(size, ROOT, work / f"now-{size}")
            shutil.rmtree(work / f"now-{size}", ignore_errors=True)
            before: dict[str, Any] | None = None
            if size in baseline_sizes:
                before = measure(size, base, work / f"before-{size}")
                shutil.rmtree(work / f"before-{size}", ignore_errors=True)
            totals[size] = now["total_s"]
            target = TARGETS.get(size)
            old_s = f"{before['total_s']:.2f}" if before else "-"
            old_ratio = f"{now['total_s'] / before['total_s']:.3f}" if before else "-"
            print(f"| {size} | {now['total_s']:.2f} | {now['load_s']:.2f} | "
                  f"{now['write_s']:.2f} | {now['submit_s']:.2f} | {old_s} | "
                  f"{old_ratio} | {now['sbatch']} |")
            rows.append(row(f"submit a {size:,}-model sweep (load, write, sbatch, record)", "s",
                            round(now["total_s"], 2),
                            round(before["total_s"], 2) if before else None,
                            baseline_label=f"hpceval at {args.baseline_ref}" if before else None,
                            better="lower", target=f"< {target:g} s" if target else None,
                            ok=now["total_s"] < target if target else None))
            note = (f"{size:,} models: load {now['load_s']:.2f} s, render+write "
                    f"{now['write_s']:.2f} s, submit {now['submit_s']:.2f} s "
                    f"({now['files']:,} files; sbatch {now['sbatch']})")
            if before:
                note += (f"; baseline load {before['load_s']:.2f}, write "
                         f"{before['write_s']:.2f}, submit {before['submit_s']:.2f}")
            notes.append(note)
        if len(totals) > 1:
            small, large = min(totals), max(totals)
            scale = totals[large] / totals[small]
            print(f"\n{large:,} models took {scale:.2f}x the time of {small:,} in this run "
                  f"(linear: {large / small:g}x)")
            rows.append(row(f"{large:,}-model submit time / {small:,}-model (this run)", "x",
                            round(scale, 2), large / small,
                            baseline_label=f"linear scaling, {large / small:g}x the models",
                            better="lower"))
    notes.append("Runs live on tmpfs (/dev/shm); on Lustre each file's fsync adds to write.")
    for note in notes:
        print(f"- {note}")
    write_result(args.json, name="sweep_submit", title="Sweep submit time",
                 command=command_line("sweep_submit.py"), rows=rows, notes=notes)


if __name__ == "__main__":
    main()
