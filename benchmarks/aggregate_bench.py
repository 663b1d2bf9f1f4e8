"""Results aggregation over 10,000 task result files, against a naive json.load loop.

    .venv/bin/python benchmarks/aggregate_bench.py [--files 10000] [--repeat 3] [--quick]

Writes a synthetic output directory with hpceval's own writers: runs of 25 models x 20 tasks,
each task finalized by `finalize_task` (results.json in the unified schema with 3 metrics,
manifest.json, then the done marker), run.json per run and one registry line per run. Then it
times, median of --repeat, with the page cache warm for both sides:

* in-process: `results_frame` (the long table `hpceval results` builds) against a naive loop
  over the same files (glob, json.load, one dict per metric: no done check, no DataFrame);
  then the leaderboard, the CSV text (against `csv.DictWriter` over the naive rows), parquet,
  and the HTML report;
* whole process: `hpceval results --format csv -O FILE` against a Python process running the
  naive loop and `csv.DictWriter`, plus `--leaderboard` and `--format parquet`.

Row counts are checked on every output (CSV, parquet) so a fast wrong answer fails the run.
About 1.5 minutes with --quick (one timed call each) and 3 with the defaults on 2 cores.
"""

from __future__ import annotations

import argparse
import csv
import inspect
import io
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from report_json import (
    add_json_option,
    bench_workdir,
    command_line,
    row,
    write_result,
)

from hpceval.contract import SWEEP_SCRIPT, element_script, task_dir
from hpceval.records import ModelRecord, RunRecord, TaskRecord, write_run_record
from hpceval.results.report import html_report
from hpceval.results.store import finalize_task
from hpceval.results.table import leaderboard, parquet_available, render, results_frame
from hpceval.runs.registry import register_run
from hpceval.tasks.result import Metric, TaskResult

HARNESS = "lm-evaluation-harness"
NAIVE = "naive json.load loop"
FILTERS = ("strict-match", "flexible-extract", None)


def naive_rows(output_dir: Path) -> list[dict[str, Any]]:
    """The baseline: glob, json.load, one dict per metric. Self-contained (imports inside):
    its source also runs as its own process, see `naive_csv_program`."""
    import glob
    import json
    import os

    rows = []
    pattern = os.path.join(output_dir, "*", "models", "*", "tasks", "*", "results.json")
    for path in sorted(glob.glob(pattern)):
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        parts = path.split(os.sep)
        for m in data["metrics"]:
            rows.append({"run": parts[-6], "model": parts[-4], "task": data["task"],
                         "subtask": m["task"], "metric": m["name"], "filter": m["filter"],
                         "value": m["value"], "stderr": m["stderr"]})
    return rows


def naive_csv_program() -> str:
    """`python -c` text: the naive loop, then csv.DictWriter to argv[2]."""
    return "from typing import Any\nfrom pathlib import Path\n" + inspect.getsource(
        naive_rows) + """
import csv, sys
rows = naive_rows(sys.argv[1])
with open(sys.argv[2], "w", newline="", encoding="utf-8") as out:
    writer = csv.DictWriter(out, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
"""


def generate_tree(output_dir: Path, files: int, *, metrics: int = 3, models_per_run: int = 25,
                  tasks_per_model: int = 20, seed: int = 0) -> list[Path]:
    """`files` finished tasks in runs of models_per_run x tasks_per_model, written with
    hpceval's writers; returns the run directories (oldest first)."""
    rng = random.Random(seed)
    per_run = models_per_run * tasks_per_model
    run_dirs: list[Path] = []
    for r in range((files + per_run - 1) // per_run):
        invocation = f"20260101-{r // 3600:02d}{r // 60 % 60:02d}{r % 60:02d}-{r:06x}"
        run_dir = output_dir / invocation
        in_run = min(per_run, files - r * per_run)
        models: list[ModelRecord] = []
        for m in range((in_run + tasks_per_model - 1) // tasks_per_model):
            key = f"model-{m:03d}"
            n_tasks = min(tasks_per_model, in_run - m * tasks_per_model)
            tasks = [f"{HARNESS}.task_{t:02d}" for t in range(n_tasks)]
            models.append(ModelRecord(key, m, tuple(TaskRecord(t, t) for t in tasks),
                                      element_script(key), "vllm", key))
            for task in tasks:
                write_task(task_dir(run_dir, key, task), task, metrics, rng)
        write_run_record(run_dir, RunRecord(
            invocation, tuple(models), kind="slurm", sweep=True, entry=SWEEP_SCRIPT,
            created_at=1767225600.0 + r, user="bench", output_dir=str(output_dir),
            array_parallelism=8))
        register_run(output_dir, {"invocation_id": invocation, "run_dir": str(run_dir),
                                  "kind": "slurm", "models": [m.key for m in models],
                                  "sweep": True, "jobs": [str(1000 + r)], "user": "bench",
                                  "submitted_at": 1767225600.0 + r})
        run_dirs.append(run_dir)
    return run_dirs


def write_task(task_dir: Path, task: str, metrics: int, rng: random.Random) -> None:
    short = task.rsplit(".", 1)[-1]
    found = [Metric(short, "exact_match" if i < 2 else f"extra_{i}", rng.random(),
                    rng.random() / 50, FILTERS[i % len(FILTERS)], 1319) for i in range(metrics)]
    result = TaskResult(task, HARNESS, "0.4.13", found, source_file="harness/results.json",
                        extra={"primary_metric": "exact_match"})
    finalize_task(task_dir, result.to_json(), {
        "task": task, "harness": {"name": HARNESS, "version": "0.4.13"},
        "job": {"id": "1000_0", "nodes": "node1"}, "started_at": "2026-01-01T00:00:00+00:00",
        "finished_at": "2026-01-01T00:10:00+00:00", "hpceval_version": "bench"})


def median_s(func: Callable[[], Any], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def paired(ours: Callable[[], Any], theirs: Callable[[], Any], repeat: int
           ) -> tuple[float, float]:
    """Both sides, alternating who goes first, after one untimed call each (page cache)."""
    ours()
    theirs()
    a: list[float] = []
    b: list[float] = []
    for i in range(repeat):
        pair = [(ours, a), (theirs, b)]
        for func, samples in (pair if i % 2 == 0 else pair[::-1]):
            start = time.perf_counter()
            func()
            samples.append(time.perf_counter() - start)
    return statistics.median(a), statistics.median(b)


def run_cli(args: list[str]) -> None:
    subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=True)


def csv_rows(path: Path) -> int:
    with path.open(newline="", encoding="utf-8") as handle:
        return sum(1 for _ in csv.reader(handle)) - 1


def naive_csv_text(rows: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000, help="task results (10000)")
    parser.add_argument("--metrics", type=int, default=3, help="metrics per result (3)")
    parser.add_argument("--repeat", type=int, default=3, help="timed calls per figure (3)")
    parser.add_argument("--quick", action="store_true", help="one timed call per figure")
    add_json_option(parser)
    args = parser.parse_args()
    repeat = 1 if args.quick else args.repeat
    with bench_workdir("hpceval-aggregate-bench-") as work:
        measure(work, args.files, args.metrics, repeat, args.json)


def measure(work: Path, files: int, metrics: int, repeat: int, json_path: Path | None) -> None:
    out = work / "out"
    start = time.perf_counter()
    run_dirs = generate_tree(out, files, metrics=metrics)
    generated_s = time.perf_counter() - start
    print(f"generated {files} task results in {len(run_dirs)} runs: {generated_s:.1f} s",
          file=sys.stderr)
    expected = files * metrics
    frame = results_frame(run_dirs)
    if len(frame) != expected or len(naive_rows(out)) != expected:
        raise SystemExit(f"expected {expected} rows, hpceval {len(frame)}, naive "
                         f"{len(naive_rows(out))}")
    load_s, naive_s = paired(lambda: results_frame(run_dirs), lambda: naive_rows(out), repeat)
    rows_naive = naive_rows(out)
    csv_s, naive_csv_s = paired(lambda: render(frame, "csv"),
                                lambda: naive_csv_text(rows_naive), repeat)
    board_s = median_s(lambda: leaderboard(frame), repeat)
    html_s = median_s(lambda: html_report(frame), repeat)

    py, hpceval = sys.executable, str(Path(sys.executable).with_name("hpceval"))
    base = [hpceval, "results", "--output-dir", str(out)]
    ours_csv, theirs_csv = work / "hpceval.csv", work / "naive.csv"
    cli_s, naive_cli_s = paired(
        lambda: run_cli([*base, "--format", "csv", "-O", str(ours_csv)]),
        lambda: run_cli([py, "-c", naive_csv_program(), str(out), str(theirs_csv)]), repeat)
    if csv_rows(ours_csv) != expected or csv_rows(theirs_csv) != expected:
        raise SystemExit(f"CSV rows: hpceval {csv_rows(ours_csv)}, naive "
                         f"{csv_rows(theirs_csv)}, expected {expected}")
    cli_board_s = median_s(lambda: run_cli([*base, "--leaderboard"]), repeat)
    pandas_s = median_s(lambda: run_cli([py, "-c", "import pandas"]), repeat)
    rows = [
        row(f"load {files:,} task results into the long table (in-process)", "ms",
            round(load_s * 1000, 1), round(naive_s * 1000, 1), baseline_label=NAIVE,
            better="lower"),
        row(f"throughput, {files:,} task results (in-process)", "files/s",
            round(files / load_s), round(files / naive_s), baseline_label=NAIVE,
            better="higher"),
        row(f"CSV text of {expected:,} metric rows (in-process)", "ms",
            round(csv_s * 1000, 1), round(naive_csv_s * 1000, 1),
            baseline_label="csv.DictWriter over the naive rows", better="lower"),
        row("leaderboard (in-process)", "ms", round(board_s * 1000, 1)),
        row("HTML report (in-process)", "ms", round(html_s * 1000, 1)),
        row(f"`hpceval results --format csv -O FILE`, {files:,} files (whole process)", "ms",
            round(cli_s * 1000, 1), round(naive_cli_s * 1000, 1),
            baseline_label="python: naive loop + csv.DictWriter", better="lower"),
        row("`hpceval results --leaderboard` (whole process)", "ms",
            round(cli_board_s * 1000, 1)),
    ]
    if parquet_available():
        parquet = work / "hpceval.parquet"
        cli_parquet_s = median_s(
            lambda: run_cli([*base, "--format", "parquet", "-O", str(parquet)]), repeat)
        import pandas as pd

        if len(pd.read_parquet(parquet)) != expected:
            raise SystemExit(f"parquet has {len(pd.read_parquet(parquet))} rows, not {expected}")
        rows.append(row("`hpceval results --format parquet -O FILE` (whole process)", "ms",
                        round(cli_parquet_s * 1000, 1)))
    series = scaling(run_dirs, files, repeat)
    print_table(rows, files, len(run_dirs), metrics)
    print(f"\nA bare `python -c 'import pandas'` took {pandas_s * 1000:.0f} ms here.")
    notes = [f"{files:,} results.json files ({metrics} metrics each) in {len(run_dirs)} runs of "
             f"25 models x 20 tasks, written by finalize_task in {generated_s:.1f} s; on tmpfs "
             "(/dev/shm) when writable, page cache warm for both sides.",
             "hpceval also checks each task's done marker, reads run.json, parses the unified "
             "schema and builds a pandas DataFrame; the naive loop does none of that.",
             f"Whole-process figures include Python start-up and importing pandas: a bare "
             f"`python -c 'import pandas'` took {pandas_s * 1000:.0f} ms in this run.",
             f"Median of {repeat} timed call(s), the two sides alternating."]
    write_result(json_path, name="aggregate", title="Results aggregation over "
                 f"{files:,} task result files", command=command_line("aggregate_bench.py"),
                 rows=rows, notes=notes, series=series)


def scaling(run_dirs: list[Path], files: int, repeat: int) -> dict[str, Any]:
    """In-process load time for the first k runs: how the table scales with the file count."""
    per_run = files / len(run_dirs)
    xs, ys = [], []
    for k in sorted({max(1, len(run_dirs) // 10), max(1, len(run_dirs) // 2), len(run_dirs)}):
        xs.append(min(files, round(k * per_run)))
        ys.append(round(median_s(partial(results_frame, run_dirs[:k]), repeat) * 1000, 1))
    return {"results_frame ms": {"x": xs, "y": ys, "x_label": "task result files"}}


def print_table(rows: list[dict[str, Any]], files: int, runs: int, metrics: int) -> None:
    print(f"{files:,} task results ({metrics} metrics each) in {runs} runs\n")
    print("| what | unit | hpceval | naive baseline | ratio |\n|---|---|---:|---:|---:|")
    for r in rows:
        base = "" if r["baseline"] is None else f"{r['baseline']:g}"
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        print(f"| {r['metric']} | {r['unit']} | {r['hpceval']:g} | {base} | {ratio} |")


if __name__ == "__main__":
    main()
