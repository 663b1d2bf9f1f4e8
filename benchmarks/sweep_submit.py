"""Sweep submit time at 1,000, 3,000 and 10,000 models, against hpceval before the fast paths.

    .venv/bin/python benchmarks/sweep_submit.py [--sizes 1000,3000,10000] [--baseline-ref REF]
        [--baseline-sizes 1000,10000] [--quick]

Each figure is one `hpceval submit` of a sweep through its own code path, in a fresh process:
load and check the run file (`load_run`), render and write the run directory (`create_run`),
submit and record (`submit_prepared`). The run file is the same template for every model with
a different name (a checkpoint sweep's shape), two tasks each. A sweep is submitted for real,
to the dev cluster with `sbatch --hold`, and cancelled at once (by the child, and again by this
script from the ids the child logged, whatever happened to the child). One larger than the
cluster's MaxArraySize (`scontrol show config`, 1001 by default) is split into as few arrays as
it allows (issue 38 item 12): 3,000 models are 3 real arrays.

Slurm counts every array task against MaxJobCount (10,000 by default, the dev cluster's too),
a cancelled one until MinJobAge (300 s) has passed, and an sbatch over the count waits
("temporarily unable to accept job"). So a sweep is submitted for real only while its tasks
fit in MaxJobCount less the records the controller holds and less a fifth kept for others'
jobs: a 10,000-model sweep never fits here (and trying would stall everyone's sbatch for 5
minutes); its submit stops at the sbatch call (a client that records the calls, the split
included), for a cluster that would take it: hpceval now refuses a run of more jobs than the
cluster's MaxJobCount at submit, and a recorded submit stands for a site that raised it. The
baseline's hpceval did not split: above MaxArraySize its submit is recorded too.

Baseline, in the same run: the same steps with hpceval as it was at --baseline-ref (default
3025bc6, main before issue 22), taken with `git archive` into a temporary folder. `hpceval
status` of such a sweep stays one sacct call, however many arrays (benchmarks/status_refresh.py
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
SUBMITTED = "submitted.txt"  # the child's log of the job ids it submitted
TARGETS = {1000: 3.0, 10000: 30.0}  # seconds, issue 22
DEFAULT_REF = "3025bc6"


def max_array_size() -> int:
    """The dev cluster's MaxArraySize, as the cluster reports it (Slurm's default 1001)."""
    out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True,
                         timeout=60, check=False)
    for line in out.stdout.splitlines():
        name, _, value = line.partition("=")
        if name.strip() == "MaxArraySize" and value.strip().isdigit():
            return int(value.strip())
    return 1001


def job_room() -> int:
    """Array tasks a sweep may add for real: MaxJobCount less the job records the controller
    holds now (squeue lists them, pending array tasks one a line, ended ones until MinJobAge)
    and less a fifth of it kept for others, so that their sbatch never waits on this one."""
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True,
                            timeout=60, check=False).stdout
    most = next((int(v.strip()) for n, _, v in (line.partition("=") for line in
                                                config.splitlines())
                 if n.strip() == "MaxJobCount" and v.strip().isdigit()), 10000)
    held = subprocess.run(["squeue", "--noheader", "--array", "--states=all", "--format=%i"],
                          capture_output=True, text=True, timeout=60, check=False).stdout
    return most - most // 5 - len(held.split())


def cancel_logged(work: Path) -> int:
    """scancel every job the child logged (it cancels them itself; this covers a child that
    died or timed out first). Cancelling an ended job is harmless."""
    try:
        ids = sorted(set((work / SUBMITTED).read_text().split()))
    except OSError:
        return 0
    if ids:
        subprocess.run(["scancel", *ids], capture_output=True, timeout=120, check=False)
    return len(ids)


def measure(size: int, source: Path, work: Path, *, real: bool) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(source))
    try:
        out = subprocess.run(
            [sys.executable, str(CHILD), str(size), str(work), "real" if real else "recorded"],
            env=env, cwd=source, capture_output=True, text=True, timeout=1800, check=False)
    finally:
        cancel_logged(work)
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
    parser.add_argument("--sizes", default="1000,3000,10000")
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
    limit = max_array_size()
    submits: dict[int, float] = {}
    real_sizes: dict[int, bool] = {}
    with bench_workdir("hpceval-sweep-submit-") as work, \
            tempfile.TemporaryDirectory(prefix="hpceval-baseline-") as old:
        base = baseline_tree(args.baseline_ref, Path(old))
        print(f"MaxArraySize {limit} (scontrol show config)")
        print("| models | hpceval s | load | write | submit | arrays | baseline s | ratio "
              "| sbatch |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for size in sizes:
            now = measure(size, ROOT, work / f"now-{size}", real=size + 1 <= job_room())
            shutil.rmtree(work / f"now-{size}", ignore_errors=True)
            before: dict[str, Any] | None = None
            if size in baseline_sizes:
                before = measure(size, base, work / f"before-{size}", real=size <= limit)
                shutil.rmtree(work / f"before-{size}", ignore_errors=True)
            totals[size] = now["total_s"]
            submits[size] = now["submit_s"]
            real_sizes[size] = now["sbatch"].startswith("real")
            target = TARGETS.get(size)
            old_s = f"{before['total_s']:.2f}" if before else "-"
            old_ratio = f"{now['total_s'] / before['total_s']:.3f}" if before else "-"
            print(f"| {size} | {now['total_s']:.2f} | {now['load_s']:.2f} | "
                  f"{now['write_s']:.2f} | {now['submit_s']:.2f} | {now['arrays']} | {old_s} | "
                  f"{old_ratio} | {now['sbatch']} |")
            rows.append(row(f"submit a {size:,}-model sweep (load, write, sbatch, record)", "s",
                            round(now["total_s"], 2),
                            round(before["total_s"], 2) if before else None,
                            baseline_label=f"hpceval at {args.baseline_ref}" if before else None,
                            better="lower", target=f"< {target:g} s" if target else None,
                            ok=now["total_s"] < target if target else None))
            note = (f"{size:,} models: load {now['load_s']:.2f} s, render+write "
                    f"{now['write_s']:.2f} s, submit {now['submit_s']:.2f} s "
                    f"({now['files']:,} files; {now['arrays']} array(s), MaxArraySize "
                    f"{limit}; sbatch {now['sbatch']}"
                    + (", then cancelled)" if real_sizes[size] else ")"))
            if before:
                note += (f"; baseline load {before['load_s']:.2f}, write "
                         f"{before['write_s']:.2f}, submit {before['submit_s']:.2f}")
            notes.append(note)
        real = [s for s in sizes if s in totals and real_sizes.get(s)]
        if len(real) > 1 and max(real) != max(totals):
            small, large = min(real), max(real)
            rows.append(row(f"{large:,}-model submit time / {small:,}-model (both real "
                            "sbatch, this run)", "x", round(totals[large] / totals[small], 2),
                            large / small,
                            baseline_label=f"linear scaling, {large / small:g}x the models",
                            better="lower"))
            print(f"{large:,} models (real sbatch) took {totals[large] / totals[small]:.2f}x "
                  f"the time of {small:,} (real sbatch) in this run; the submit step "
                  f"{submits[large] / submits[small]:.2f}x ({submits[large]:.2f} s against "
                  f"{submits[small]:.2f} s)")
            rows.append(row(f"{large:,}-model submit step / {small:,}-model (sbatch + record, "
                            "both real, this run)", "x", round(submits[large] / submits[small], 2),
                            large / small,
                            baseline_label=f"linear scaling, {large / small:g}x the models",
                            better="lower"))
        if len(totals) > 1:
            small, large = min(totals), max(totals)
            scale = totals[large] / totals[small]
            how = (f"sbatch {'real' if real_sizes[large] else 'recorded'} / "
                   f"{'real' if real_sizes[small] else 'recorded'}")
            print(f"\n{large:,} models took {scale:.2f}x the time of {small:,} in this run "
                  f"(linear: {large / small:g}x; {how})")
            rows.append(row(f"{large:,}-model submit time / {small:,}-model (this run, {how})",
                            "x",
                            round(scale, 2), large / small,
                            baseline_label=f"linear scaling, {large / small:g}x the models",
                            better="lower"))
            sbatch = submits[large] / submits[small]
            print(f"{large:,} models' submit step (sbatch of every array + jobs.json) took "
                  f"{sbatch:.2f}x the {small:,}-model one ({submits[large]:.2f} s against "
                  f"{submits[small]:.2f} s; {how})")
            rows.append(row(f"{large:,}-model submit step / {small:,}-model (sbatch + record, "
                            f"this run, {how})", "x", round(sbatch, 2), large / small,
                            baseline_label=f"linear scaling, {large / small:g}x the models",
                            better="lower"))
    notes.append("Runs live on tmpfs (/dev/shm); on Lustre each file's fsync adds to write.")
    for note in notes:
        print(f"- {note}")
    write_result(args.json, name="sweep_submit", title="Sweep submit time",
                 command=command_line("sweep_submit.py"), rows=rows, notes=notes)


if __name__ == "__main__":
    main()
