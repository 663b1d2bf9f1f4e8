"""HTML report build time, against a bare json loop over the same files.

    .venv/bin/python benchmarks/report_bench.py [--files 10000] [--samples 100000] [--repeat 3]
                                                [--steps 50] [--steps-only] [--quick]

Two synthetic output directories written with hpceval's own writers (aggregate_bench's
generator), page cache warm for both sides, median of --repeat:

* --files finished tasks (runs of 25 models x 20 tasks, 3 metrics each, no sample files):
  `html_report` (results table, comparison, what-was-run from every run.json, run.yaml and
  manifest.json) against a json.load loop over the same JSON files (results.json,
  manifest.json, run.json), and, as before, against the loop over results.json alone;
* --samples lm-eval sample lines in 100 tasks (10 models x 10 tasks, samples_*.jsonl under each
  task's harness/ folder, every 3rd answer wrong): the report (20 samples and 20 wrong ones per
  task) against a bare loop that json-decodes every sample line. The report reads a bounded
  prefix of each file, so this ratio says what that bound buys; the worst case, where no answer
  is wrong and the report reads up to its scan limit (10,000 lines per task), is timed too;
* the score-vs-step page (`hpceval watch`: one run per checkpoint) for --steps runs of 10 tasks
  (step_table + step_report_html) against the same naive loop over their results.json files.

Every page is checked (task sections, sample rows) so a fast wrong answer fails the run.
About 1 minute with --quick and 3 with the defaults on 2 cores.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

from aggregate_bench import NAIVE, generate_tree, median_s, naive_rows, paired
from report_json import (
    add_json_option,
    bench_workdir,
    command_line,
    row,
    write_result,
)

from hpceval.results.checkpoints import step_table
from hpceval.results.report import html_report, step_report_html
from hpceval.results.table import results_frame

SAMPLE_TASKS = 100  # 10 models x 10 tasks


def sample_line(i: int, wrong: bool) -> str:
    """One line as lm-eval 0.4 writes it for a generate_until task (gsm8k-sized prompt)."""
    answer = str(i * 3 if wrong else i * 2)
    return json.dumps({
        "doc_id": i, "doc": {"question": f"question {i} " + "lorem ipsum " * 30,
                             "answer": str(i * 2)},
        "target": str(i * 2),
        "arguments": {"gen_args_0": {"arg_0": f"Question: what is {i} + {i}? " + "ctx " * 80,
                                     "arg_1": {"until": ["Question:"], "do_sample": False}}},
        "resps": [[answer]], "filtered_resps": [answer], "filter": "strict-match",
        "metrics": ["exact_match"], "doc_hash": "0" * 64, "prompt_hash": "1" * 64,
        "target_hash": "2" * 64, "exact_match": 0.0 if wrong else 1.0}) + "\n"


def write_samples(run_dirs: list[Path], total: int, *, wrong_every: int) -> None:
    task_dirs = sorted(glob.glob(os.path.join(run_dirs[0], "models", "*", "tasks", "*")))
    per_task = total // len(task_dirs)
    for task_dir in task_dirs:
        folder = os.path.join(task_dir, "harness", "model")
        os.makedirs(folder, exist_ok=True)
        name = f"samples_{os.path.basename(task_dir).rsplit('.', 1)[-1]}_2026.jsonl"
        with open(os.path.join(folder, name), "w", encoding="utf-8") as handle:
            handle.writelines(sample_line(i, wrong_every > 0 and i % wrong_every == 0)
                              for i in range(per_task))


SAME_FILES = "json.load of the same JSON files"


def naive_report_files(output_dir: Path) -> int:
    """The baseline for the results page: json.load every JSON file the report reads (each
    task's results.json and manifest.json, each run's run.json; run.yaml is YAML and left out)."""
    n = 0
    for pattern in (("*", "models", "*", "tasks", "*", "results.json"),
                    ("*", "models", "*", "tasks", "*", "manifest.json"), ("*", "run.json")):
        for path in glob.glob(os.path.join(output_dir, *pattern)):
            with open(path, encoding="utf-8") as handle:
                json.load(handle)
            n += 1
    return n


def naive_samples(output_dir: Path) -> int:
    """The baseline: glob the sample files, json.loads every line."""
    n = 0
    pattern = os.path.join(output_dir, "*", "models", "*", "tasks", "*", "harness", "*",
                           "samples_*.jsonl")
    for path in glob.glob(pattern):
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                json.loads(line)
                n += 1
    return n


def expected_rows(per_task: int, wrong_every: int, first: int = 20) -> int:
    """Sample rows per task: the first `first`, then wrong ones until `first` wrong in all."""
    head = min(first, per_task)
    wrong_head = len(range(0, head, wrong_every)) if wrong_every else 0
    wrong_all = len(range(0, per_task, wrong_every)) if wrong_every else 0
    return head + max(0, min(first, wrong_all) - wrong_head)


def check(page: str, tasks: int, sample_rows: int | None = None) -> None:
    found = page.count('class="task-compare"')
    if found != tasks:
        raise SystemExit(f"the report compares {found} tasks, expected {tasks}")
    shown = page.count('<tr class="sample ')
    if sample_rows is not None and shown != sample_rows:
        raise SystemExit(f"the report shows {shown} sample rows, expected {sample_rows}")


def _report(run_dirs: list[Path]) -> str:
    return html_report(results_frame(run_dirs), run_dirs=run_dirs)


def _step_report(points: list[tuple[int, Path]]) -> str:
    return step_report_html(step_table(points))


def measure_steps(work: Path, steps: int, repeat: int) -> dict[str, Any]:
    """The score-vs-step page of `steps` runs (one per checkpoint) of 1 model x 10 tasks."""
    out = work / "steps"
    dirs = generate_tree(out, steps * 10, models_per_run=1, tasks_per_model=10)
    points = [(1000 * (i + 1), d) for i, d in enumerate(dirs)]
    page = _step_report(points)
    charts, circles = page.count('class="step-chart"'), page.count('<circle class="point"')
    if (charts, circles) != (10, 10 * steps):
        raise SystemExit(f"the step page has {charts} charts and {circles} points, "
                         f"expected 10 and {10 * steps}")
    ours, theirs = paired(partial(_step_report, points), partial(naive_rows, out), repeat)
    return row(f"score-vs-step page, {steps} steps x 10 tasks (step table + page)", "ms",
               round(ours * 1000, 1), round(theirs * 1000, 1), baseline_label=NAIVE,
               better="lower")


def print_rows(rows: list[dict[str, Any]]) -> None:
    print("| what | unit | hpceval | baseline | ratio |\n|---|---|---:|---:|---:|")
    for r in rows:
        base = "" if r["baseline"] is None else f"{r['baseline']:g}"
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        print(f"| {r['metric']} | {r['unit']} | {r['hpceval']:g} | {base} | {ratio} |")


def measure(work: Path, files: int, samples: int, repeat: int, json_path: Path | None, *,
            steps: int = 50) -> None:
    rows: list[dict[str, Any]] = []
    big = work / "results"
    start = time.perf_counter()
    run_dirs = generate_tree(big, files)
    print(f"generated {files} task results: {time.perf_counter() - start:.1f} s",
          file=sys.stderr)
    frame = results_frame(run_dirs)
    tasks = frame["task"].nunique()
    check(html_report(frame, run_dirs=run_dirs), tasks)
    if naive_report_files(big) != 2 * files + len(run_dirs):
        raise SystemExit("the naive loop did not find every results.json, manifest.json and "
                         "run.json")
    report_s, naive_s = paired(partial(_report, run_dirs), partial(naive_report_files, big),
                               repeat)
    rows_s = median_s(partial(naive_rows, big), repeat)  # the figure shown before issue 23
    size = len(html_report(frame, run_dirs=run_dirs).encode())
    rows.append(row(f"report of {files:,} task results (results table + page)", "ms",
                    round(report_s * 1000, 1), round(naive_s * 1000, 1),
                    baseline_label=SAME_FILES, better="lower"))
    rows.append(row(f"the same report against the loop over results.json only ({NAIVE})",
                    "ms", round(report_s * 1000, 1), round(rows_s * 1000, 1),
                    baseline_label=NAIVE, better="lower"))
    rows.append(row("its page size", "KiB", round(size / 1024)))

    for label, wrong_every in (("every 3rd answer wrong", 3), ("no answer wrong", 0)):
        out = work / f"samples-{wrong_every}"
        dirs = generate_tree(out, SAMPLE_TASKS, models_per_run=10, tasks_per_model=10)
        write_samples(dirs, samples, wrong_every=wrong_every)
        sframe = results_frame(dirs)
        shown = expected_rows(samples // SAMPLE_TASKS, wrong_every)
        check(html_report(sframe, run_dirs=dirs), sframe["task"].nunique(), SAMPLE_TASKS * shown)
        if naive_samples(out) != samples:
            raise SystemExit(f"naive loop read {naive_samples(out)} samples, not {samples}")
        ours, theirs = paired(partial(_report, dirs), partial(naive_samples, out), repeat)
        rows.append(row(f"report with {samples:,} samples in {SAMPLE_TASKS} tasks, {label}",
                        "ms", round(ours * 1000, 1), round(theirs * 1000, 1),
                        baseline_label="json.loads of every sample line", better="lower"))
    rows.append(measure_steps(work, steps, repeat))
    print_rows(rows)
    notes = [f"{files:,} results.json files in runs of 25 models x 20 tasks; the report also "
             "reads every run.json, run.yaml and manifest.json, the naive loop only results.json.",
             f"{samples:,} lm-eval sample lines (~1 KB each) in {SAMPLE_TASKS} tasks; the report "
             "shows the first 20 samples and the first 20 wrong ones per task and stops reading "
             "a file once it has them (at most 10,000 lines per task).",
             f"Score-vs-step page: {steps} runs of 1 model x 10 tasks (one per checkpoint); the "
             "page also reads each run's run.json and manifests (what was run).",
             "On tmpfs (/dev/shm) when writable, page cache warm for both sides; "
             f"median of {repeat} timed call(s), the two sides alternating."]
    write_result(json_path, name="report", title="HTML report build time",
                 command=command_line("report_bench.py"), rows=rows, notes=notes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000, help="task results (10000)")
    parser.add_argument("--samples", type=int, default=100_000, help="sample lines (100000)")
    parser.add_argument("--steps", type=int, default=50, help="score-vs-step page: runs (50)")
    parser.add_argument("--steps-only", action="store_true",
                        help="only the score-vs-step figure (prints it, writes no JSON)")
    parser.add_argument("--repeat", type=int, default=3, help="timed calls per figure (3)")
    parser.add_argument("--quick", action="store_true", help="one timed call per figure")
    add_json_option(parser)
    args = parser.parse_args()
    repeat = 1 if args.quick else args.repeat
    with bench_workdir("hpceval-report-bench-") as work:
        if args.steps_only:
            print_rows([measure_steps(work, args.steps, repeat)])
        else:
            measure(work, args.files, args.samples, repeat, args.json, steps=args.steps)


if __name__ == "__main__":
    main()
