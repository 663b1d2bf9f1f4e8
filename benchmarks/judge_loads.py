"""Judge loads of a 3-model x 3-judged-task sweep: one judge per sweep vs NeMo Evaluator.

    .venv/bin/python benchmarks/judge_loads.py [--load-minutes 10] [--judge-gpus 8]
        [--quick] [--json PATH]

Needs the Slurm dev cluster (scripts/slurm/start-cluster.sh). Every figure is MEASURED: the same
evaluation (3 models x 3 judged tasks) is submitted three ways, and the judge's loads are the
lines its command appends, one per start, before it execs the server
(tests/fakes/oracle_server.py, a ``type: command`` judge); each task asks the judge once (the
judge-it harness of tests/integration/test_judge_job.py, through
``auxiliary_deployments.judge.chat_url``):

* hpceval, ``scope: sweep``: one array job and ONE judge job for it;
* hpceval, ``scope: job``: one array job, the judge served inside each model's job;
* NeMo Evaluator's structure: one job per model x task, each serving its judge (the launcher
  starts one run.sub per task and every run.sub starts its auxiliary deployments; it has no
  sweep, so one invocation per model). Rendered and run as hpceval's per-task equivalent: 9
  single-model, single-task runs with ``scope: job``.

In all three the judge has a node of its own (``num_nodes: 1``, as NeMo Evaluator gives each
auxiliary deployment). Judge GPU-hours spent loading = loads x per-load time x GPUs: a fake
judge's load says nothing about a 72B one, so the per-load cost is stated (``--load-minutes``
x ``--judge-gpus``). ``--quick``: 2 tasks per model.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from report_json import (  # puts ROOT on sys.path
    add_json_option,
    command_line,
    exit_on_sigterm,
    row,
    write_result,
)

MODELS = 3
TIMEOUT_S = 900.0


def catalogue(work: Path, tasks: int) -> list[str]:
    """judge-it with `tasks` judged tasks (each asks the judge once); their names."""
    from tests.integration.test_judge_job import CATALOGUE

    names = [f"judged_{c}" for c in "abcdefgh"[:tasks]]
    head = CATALOGUE[:CATALOGUE.index("tasks:\n")]
    lines = "".join(f"  - {{name: {n}, task_id: {n}, endpoint_type: chat, "
                    "description: asks the judge}\n" for n in names)
    (work / "catalogue").mkdir(parents=True, exist_ok=True)
    (work / "catalogue" / "judge_it.yaml").write_text(head + "tasks:\n" + lines)
    return [f"judge-it.{n}" for n in names]


def environment(work: Path) -> None:
    os.environ["HPCEVAL_TASKS_PATH"] = str(work / "catalogue")
    for name in ("XDG_CACHE_HOME", "HPCEVAL_CACHE_DIR"):
        os.environ[name] = str(work / name.lower())
    os.environ.pop("HPCEVAL_PROFILE", None)


def run_config(work: Path, name: str, models: list[str], tasks: list[str], scope: str,
               loads: Path) -> Path:
    from tests.integration.drill_support import oracle_command

    judge = oracle_command("judge-model", work / f"{name}-judge.jsonl")
    run: dict[str, Any] = {
        "defaults": [{"execution": "local-dev"}, {"deployment": "command"}],
        "execution": {"gpus_per_node": 0, "output_dir": str(work / "runs"),
                      "walltime": "00:10:00", "max_walltime": "00:20:00"},
        "deployment": {"health_timeout": 120, "served_model_name": models[0],
                       "command": oracle_command("model", work / f"{name}-model.jsonl")},
        "auxiliary_deployments": {"judge": {
            "type": "command", "served_model_name": "judge-model", "num_nodes": 1,
            "health_timeout": 120, "runtime": "host", "scope": scope,
            "command": f'echo "$(date +%s.%N) ${{SLURM_JOB_ID:-local}}" >> {loads}; {judge}'}},
        "evaluation": {"tasks": [{"name": t, "params": {"extra": {"judge": {
            "url": "auxiliary_deployments.judge.chat_url",
            "model_id": "auxiliary_deployments.judge.model_id"}}}} for t in tasks]},
    }
    if len(models) > 1:
        run["models"] = [{"name": m} for m in models]
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(run, sort_keys=False))
    return path


def measure(work: Path, name: str, runs: list[tuple[list[str], list[str]]], scope: str
            ) -> dict[str, Any]:
    """Submit every (models, tasks) run, wait for all their jobs; the judge's loads, answers."""
    from hpceval.backends.slurm.client import CommandSlurmClient
    from hpceval.backends.slurm.states import Phase
    from hpceval.config import load_run
    from hpceval.runs.state import Tracker
    from hpceval.runs.submit import submit_configs
    from tests.integration.drill_support import answered

    loads = work / f"{name}-loads"
    client = CommandSlurmClient()
    tracker = Tracker(client, min_interval_s=2.0)
    start = time.monotonic()
    submitted = []
    try:
        for i, (models, tasks) in enumerate(runs):
            path = run_config(work, f"{name}-{i}", models, tasks, scope, loads)
            submitted.append(submit_configs(load_run(path), client))
            tracker.add(submitted[-1].run_dir)
        while True:
            states = tracker.refresh()
            if all(s.phase.terminal and all(j.phase.terminal for j in s.judges)
                   for s in states):
                break
            if time.monotonic() - start > TIMEOUT_S:
                raise SystemExit(f"{name}: not done in {TIMEOUT_S:g} s: "
                                 f"{[(s.phase.value, s.reason) for s in states]}")
            time.sleep(1.0)
    finally:
        client.cancel([j for s in submitted for j in s.job_ids])  # nothing left queued
    failed = [(s.ref.invocation_id, s.reason) for s in states if s.phase is not Phase.DONE]
    if failed:
        raise SystemExit(f"{name}: runs did not finish: {failed}")
    lines = loads.read_text(encoding="utf-8").splitlines()
    asked = sum(len(answered(work / f"{name}-{i}-judge.jsonl")) for i in range(len(runs)))
    return {"loads": len(lines), "answers": asked, "runs": len(runs),
            "jobs": sum(len(s.job_ids) for s in submitted), "wall_s": time.monotonic() - start}


def gpu_hours(loads: int, load_minutes: float, gpus: int) -> float:
    return round(loads * load_minutes / 60 * gpus, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load-minutes", type=float, default=10.0,
                        help="minutes one judge load takes (default 10: a 72B judge)")
    parser.add_argument("--judge-gpus", type=int, default=8,
                        help="GPUs one judge load occupies (default 8: TP=8)")
    parser.add_argument("--quick", action="store_true", help="2 judged tasks per model")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    add_json_option(parser)
    args = parser.parse_args()
    exit_on_sigterm()
    work = Path(tempfile.mkdtemp(prefix="judge-loads-"))
    environment(work)
    os.environ.setdefault("HPCEVAL_TEST_PYTHON", sys.executable)  # tests/fakes/job_python
    try:
        tasks = catalogue(work, 2 if args.quick else 3)
        models = [f"model-{c}" for c in "abc"[:MODELS]]
        figures = {
            "sweep": measure(work, "sweep", [(models, tasks)], "sweep"),
            "job": measure(work, "job", [(models, tasks)], "job"),
            "nel": measure(work, "nel", [([m], [t]) for m in models for t in tasks], "job"),
        }
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    report(args, figures, len(tasks))
    if args.keep:
        print(f"\nwork directory: {work}")


LABELS = {"sweep": "hpceval, scope: sweep (one judge job per sweep)",
          "job": "hpceval, scope: job (the judge in each model's job)",
          "nel": "NeMo Evaluator's structure (one job per model x task, each with its judge)"}


def report(args: argparse.Namespace, figures: dict[str, dict[str, Any]], tasks: int) -> None:
    nel = figures["nel"]["loads"]
    print(f"{MODELS} models x {tasks} judged tasks, measured on the dev cluster; a judge load "
          f"costed at {args.load_minutes:g} min on {args.judge_gpus} GPUs\n")
    print("| structure | runs | sbatch calls | judge loads (measured) | judge answers | "
          "judge GPU-hours loading | vs NeMo Evaluator |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for key, f in figures.items():
        print(f"| {LABELS[key]} | {f['runs']} | {f['jobs']} | {f['loads']} | {f['answers']} | "
              f"{gpu_hours(f['loads'], args.load_minutes, args.judge_gpus):g} | "
              f"{f['loads'] / nel:.3g}x |")
    label = "NeMo Evaluator's structure: one job per model x task, each with its judge"
    cost = f"({args.load_minutes:g} min x {args.judge_gpus} GPUs a load)"
    sweep, job = figures["sweep"]["loads"], figures["job"]["loads"]
    what = f"{MODELS} models x {tasks} judged tasks: judge loads"
    rows = [
        row(f"{what}, scope: sweep", "loads", sweep, nel, baseline_label=label,
            better="lower", target="1", ok=sweep == 1),
        row(f"{what}, scope: job", "loads", job, nel, baseline_label=label, better="lower",
            target=str(MODELS), ok=job == MODELS),
        row(f"judge GPU-hours loading, scope: sweep {cost}", "GPU-h",
            gpu_hours(sweep, args.load_minutes, args.judge_gpus),
            gpu_hours(nel, args.load_minutes, args.judge_gpus),
            baseline_label="NeMo Evaluator's structure, same per-load cost", better="lower"),
        row("requests the judge answered, scope: sweep", "requests",
            figures["sweep"]["answers"], figures["nel"]["answers"],
            baseline_label="NeMo Evaluator's structure (the same tasks)", with_ratio=False),
    ]
    notes = [
        "All loads measured on the dev cluster: the fake judge appends a line per start before "
        "it execs the server; every task asks the judge once through its job's proxy.",
        f"sbatch calls: scope: sweep {figures['sweep']['jobs']} (judge, array, aggregation); "
        f"scope: job {figures['job']['jobs']}; NeMo Evaluator's structure as hpceval's per-task "
        f"equivalent, {figures['nel']['runs']} single-model single-task runs with scope: job.",
        f"GPU-hours: loads x {args.load_minutes:g} min x {args.judge_gpus} GPUs (stated: "
        "--load-minutes/--judge-gpus); holding the judge while it serves comes on top in every "
        "structure.",
        "Wall time of each scenario (2-node CPU dev cluster, judge on a node of its own; the "
        "fake judge loads in about a second, so a separate judge job's queue and start-up "
        "are not paid back here as a real judge's minutes are): "
        + ", ".join(f"{k} {f['wall_s']:.0f} s" for k, f in figures.items()) + ".",
    ]
    write_result(args.json, name="judge", title="Judge loads: one judge per sweep", rows=rows,
                 command=command_line("judge_loads.py"), notes=notes)


if __name__ == "__main__":
    main()
