"""Status refresh cost vs. number of jobs, on the real Slurm dev cluster.

    .venv/bin/python benchmarks/status_refresh.py [--sizes 10,100,1000] [--repeat 5] [--quick]

Needs the dev cluster (scripts/slurm/start-cluster.sh). For each size N it submits real runs
through hpceval's own submit path (`create_run` + `submit_prepared`, what `hpceval submit`
calls), with `--hold` added to sbatch so that no job ever starts, in two shapes:

* sweep: one run of N models = ONE array job of N tasks (how hpceval submits a sweep);
* runs: N single-model runs = N separate jobs (sizes up to 100 with --quick).

Then it times `hpceval status` (the whole process, median of --repeat calls after one warm-up)
and the in-process `Tracker.refresh()` behind it, and counts Slurm invocations with a wrapper
put first on PATH that logs every sacct / squeue / scontrol call before running the real one.
Baseline, in the same run: naive polling, one `sacct -j ID` per job (timed on up to
--baseline-max jobs and scaled linearly to N when N is larger; the notes say so). Every job is
cancelled at the end (always, in a finally, also on SIGTERM), and the run directories deleted.
Takes about 1.5 minutes with --quick and 4 with the defaults on a busy 2-core machine, most of
it submitting (a 1000-model sweep, 1000 single runs) and the per-job baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from report_json import (
    add_json_option,
    bench_workdir,
    command_line,
    row,
    write_result,
)

from hpceval.backends.slurm.client import CommandSlurmClient
from hpceval.backends.slurm.records import SACCT_FIELDS, unique_base_ids
from hpceval.config import load_run
from hpceval.records import read_run
from hpceval.runs.index import list_runs
from hpceval.runs.jobs import read_jobs
from hpceval.runs.rundir import PreparedRun
from hpceval.runs.state import Tracker
from hpceval.runs.submit import create_run, submit_prepared

WRAPPED = ("sacct", "squeue", "scontrol", "sbatch", "scancel")
TASKS = ("gsm8k", "hellaswag")
NAIVE = "naive polling: one sacct per job"


class HeldClient(CommandSlurmClient):
    """The real client, with `--hold` added to every sbatch; remembers what it submitted."""

    def __init__(self) -> None:
        super().__init__()
        self.submitted: list[str] = []

    def submit(self, script_path: Path, *, extra_args: Sequence[str] = (),
               dependency: str | None = None) -> str:
        job_id = super().submit(script_path, extra_args=["--hold", *extra_args],
                                dependency=dependency)
        self.submitted.append(job_id)
        return job_id


@dataclass
class Measured:
    layout: str
    size: int
    status_ms: float
    status_calls: list[int]  # Slurm calls per `hpceval status` process
    refresh_ms: float
    refresh_calls: list[int]  # poller.sacct_calls delta per forced refresh
    rate_limited_calls: int  # a second, unforced refresh right after
    bare_ms: float  # one raw sacct for the same jobs
    naive_ms: float  # one sacct per job, scaled to N
    naive_measured: int  # how many of those calls were actually made
    states: dict[str, int]  # model states `hpceval status --json` reported


class Counter:
    """PATH wrappers that log each Slurm command, then exec the real binary."""

    def __init__(self, work: Path) -> None:
        self.log = work / "slurm-calls.log"
        self.bin = work / "bin"
        self.bin.mkdir()
        self.log.touch()
        for name in WRAPPED:
            real = shutil.which(name)
            if real is None:
                raise SystemExit(f"{name} not found: start the dev cluster "
                                 "(bash scripts/slurm/start-cluster.sh)")
            wrapper = self.bin / name
            wrapper.write_text(f'#!/bin/sh\necho "{name}" >> "{self.log}"\nexec "{real}" "$@"\n')
            wrapper.chmod(0o755)

    def calls(self, program: str = "sacct") -> int:
        return sum(1 for line in self.log.read_text().splitlines() if line == program)

    def slurm_reads(self) -> int:
        return sum(1 for line in self.log.read_text().splitlines()
                   if line in ("sacct", "squeue", "scontrol"))


def run_yaml(folder: Path, models: int) -> Path:
    run: dict[str, Any] = {
        "execution": {"gpus_per_node": 0, "output_dir": str(folder / "out"),
                      "array_parallelism": 4},
        "deployment": {"type": "none"},
        "target": {"api_endpoint": {"url": "http://127.0.0.1:9/v1/chat/completions",
                                    "model_id": "bench"}},
        "evaluation": {"tasks": [{"name": t} for t in TASKS]},
    }
    if models > 1:
        run["models"] = [{"name": f"model-{i:04d}"} for i in range(models)]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "run.yaml"
    path.write_text(yaml.safe_dump(run))
    return path


def submit_sweep(folder: Path, size: int, client: HeldClient) -> PreparedRun:
    configs = load_run(run_yaml(folder, size), profile="local-dev", check_environment=False)
    run = create_run(configs)
    submit_prepared(run, client, written=True)
    return run


def submit_runs(folder: Path, count: int, client: HeldClient) -> None:
    configs = load_run(run_yaml(folder, 1), profile="local-dev", check_environment=False)
    for _ in range(count):
        submit_prepared(create_run(configs), client, written=True)


def scheduler_ids(run_dirs: list[Path]) -> list[str]:
    ids = []
    for run_dir in run_dirs:
        jobs = read_jobs(run_dir)
        for model in read_run(run_dir).models:
            entry = jobs.current(model.index)
            if entry is not None:
                ids.append(entry.scheduler_id(model.index))
    return ids


def timed(func: Callable[[], Any]) -> float:
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


def status_process(args: list[str], counter: Counter, repeat: int
                   ) -> tuple[float, list[int], dict[str, int]]:
    """Median wall time of `hpceval status ARGS`, Slurm calls per call, reported states."""
    hpceval = str(Path(sys.executable).with_name("hpceval"))
    warm = subprocess.run([hpceval, "status", *args, "--json"], capture_output=True, text=True,
                          check=False)
    if warm.returncode != 0:
        raise SystemExit(f"hpceval status failed ({warm.returncode}): {warm.stderr[-2000:]}")
    states: dict[str, int] = {}
    for run in json.loads(warm.stdout):
        for model in run["models"]:
            states[model["state"]] = states.get(model["state"], 0) + 1
    samples, calls = [], []
    for _ in range(repeat):
        before = counter.slurm_reads()
        samples.append(timed(lambda: subprocess.run(
            [hpceval, "status", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            check=True)))
        calls.append(counter.slurm_reads() - before)
    return statistics.median(samples) * 1000, calls, states


def in_process(run_dirs: list[Path], repeat: int) -> tuple[float, list[int], int]:
    tracker = Tracker(min_interval_s=2.0)
    for run_dir in run_dirs:
        tracker.add(run_dir)
    samples, calls = [], []
    for _ in range(repeat):
        before = tracker.backend("slurm").scheduler_calls
        samples.append(timed(lambda: tracker.refresh(force=True)))
        calls.append(tracker.backend("slurm").scheduler_calls - before)
    # What `status --watch` does between forced refreshes: within min_interval_s, no sacct.
    before = tracker.backend("slurm").scheduler_calls
    tracker.refresh()
    return (statistics.median(samples) * 1000, calls,
            tracker.backend("slurm").scheduler_calls - before)


def naive_polling(sacct: str, ids: list[str], cap: int) -> tuple[float, int]:
    """One sacct per job, as a per-job poller makes; timed on min(cap, N), scaled to N."""
    sample = ids[:cap]
    spent = timed(lambda: [subprocess.run(
        [sacct, "-X", "--parsable2", "--noheader", "-o", "JobID,State", "-j", job_id],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True) for job_id in sample])
    return spent * 1000 * len(ids) / len(sample), len(sample)


def bare_sacct(sacct: str, ids: list[str], repeat: int) -> float:
    command = [sacct, "-X", "--parsable2", "--noheader", "-o", ",".join(SACCT_FIELDS),
               "-j", ",".join(unique_base_ids(ids))]
    return statistics.median(
        timed(lambda: subprocess.run(command, stdout=subprocess.DEVNULL, check=True))
        for _ in range(repeat)) * 1000


def wait_visible(ids: list[str], timeout_s: float = 60.0) -> None:
    """slurmdbd learns of new jobs a second or two after sbatch; measure once sacct lists
    every job, or the first refreshes would time an answer about fewer jobs."""
    client, deadline = CommandSlurmClient(), time.monotonic() + timeout_s
    while True:
        seen = client.sacct(ids)
        missing = [i for i in ids if i not in seen]
        if not missing:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"sacct still lists {len(missing)} of {len(ids)} jobs not after "
                             f"{timeout_s:g} s (is slurmdbd up?), e.g. {missing[:3]}")
        time.sleep(0.5)


def measure(layout: str, size: int, run_dirs: list[Path], status_args: list[str],
            counter: Counter, sacct: str, repeat: int, cap: int) -> Measured:
    ids = scheduler_ids(run_dirs)
    wait_visible(ids)
    status_ms, status_calls, states = status_process(status_args, counter, repeat)
    refresh_ms, refresh_calls, limited = in_process(run_dirs, repeat)
    if len(ids) != size or sum(states.values()) != size:
        raise SystemExit(f"{layout} {size}: expected {size} jobs, watched {len(ids)}, status "
                         f"showed {sum(states.values())} models")
    naive_ms, made = naive_polling(sacct, ids, cap)
    bare_ms = bare_sacct(sacct, ids, repeat)
    m = Measured(layout, size, status_ms, status_calls, refresh_ms, refresh_calls, limited,
                 bare_ms, naive_ms, made, states)
    print(f"{layout} {size}: status {status_ms:.0f} ms ({status_calls} Slurm calls), refresh "
          f"{refresh_ms:.0f} ms, naive {naive_ms:.0f} ms, states {states}", file=sys.stderr)
    return m


def cached_after_end(client: HeldClient, counter: Counter, status_args: list[str]) -> int:
    """Cancel, let status see every job end (it caches terminal states), then count the
    Slurm calls of one more `hpceval status`."""
    client.cancel(client.submitted)
    hpceval = str(Path(sys.executable).with_name("hpceval"))
    deadline = time.monotonic() + 60
    while True:
        out = subprocess.run([hpceval, "status", *status_args, "--json"], capture_output=True,
                             text=True, check=True)
        states = {m["state"] for r in json.loads(out.stdout) for m in r["models"]}
        if states <= {"cancelled"}:
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"jobs not shown as cancelled after 60 s: {sorted(states)}")
        time.sleep(1.0)
    before = counter.slurm_reads()
    subprocess.run([hpceval, "status", *status_args], stdout=subprocess.DEVNULL, check=True)
    return counter.slurm_reads() - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000", help="job counts (default 10,100,1000)")
    parser.add_argument("--repeat", type=int, default=5, help="timed calls per size (default 5)")
    parser.add_argument("--baseline-max", type=int, default=100,
                        help="most per-job sacct calls actually made per size (default 100)")
    parser.add_argument("--quick", action="store_true",
                        help="3 repeats, baseline on 30 jobs, separate runs up to 100 only")
    add_json_option(parser)
    args = parser.parse_args()
    sizes = sorted({int(s) for s in args.sizes.split(",") if s.strip()})
    repeat, cap = (3, 30) if args.quick else (args.repeat, args.baseline_max)
    run_sizes = [s for s in sizes if s <= 100] if args.quick else sizes
    results: list[Measured] = []
    cached_calls = None
    setup: dict[str, float] = {}
    with bench_workdir("hpceval-status-bench-") as work:
        counter = Counter(work)
        sacct = str(shutil.which("sacct"))
        os.environ["PATH"] = f"{counter.bin}{os.pathsep}{os.environ['PATH']}"
        client = HeldClient()
        try:
            for size in sizes:
                start = time.perf_counter()
                run = submit_sweep(work / f"sweep-{size}", size, client)
                setup[f"sweep of {size}"] = time.perf_counter() - start
                results.append(measure("sweep", size, [run.run_dir], [run.invocation_id],
                                       counter, sacct, repeat, cap))
                client.cancel(client.submitted)
                client.submitted.clear()
            folder, made = work / "runs", 0
            for size in run_sizes:
                start = time.perf_counter()
                submit_runs(folder, size - made, client)
                setup[f"{size - made} more single runs"] = time.perf_counter() - start
                made = size
                dirs = [r.run_dir for r in list_runs([folder / "out"])
                        if r.run_dir.parent == folder / "out"]
                results.append(measure("runs", size, dirs, ["--limit", str(size)], counter,
                                       sacct, repeat, cap))
            if run_sizes:
                cached_calls = cached_after_end(client, counter,
                                                ["--limit", str(run_sizes[-1])])
        finally:
            client.cancel(client.submitted)
    report(results, cached_calls, setup, args.json, repeat, cap)


def report(results: list[Measured], cached_calls: int | None, setup: dict[str, float],
           json_path: Path | None, repeat: int, cap: int) -> None:
    shapes = {"sweep": "one array job", "runs": "separate runs"}
    rows: list[dict[str, Any]] = []
    print(f"Median of {repeat} calls; Slurm calls counted by a PATH wrapper.\n")
    print("| jobs | shape | Slurm calls per `hpceval status` | `hpceval status` ms | "
          "in-process refresh ms | one bare sacct ms | naive per-job polling ms |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for m in results:
        shape = shapes[m.layout]
        calls = max(m.status_calls)
        partial = m.naive_measured < m.size
        scaled = f"; {m.naive_measured} timed, scaled to {m.size}" if partial else ""
        note = f" ({m.naive_measured} timed)" if partial else ""
        print(f"| {m.size} | {shape} | {calls} | {m.status_ms:.0f} | {m.refresh_ms:.0f} | "
              f"{m.bare_ms:.0f} | {m.naive_ms:.0f}{note} |")
        rows.append(row(f"Slurm calls per `hpceval status`, {m.size} jobs ({shape})", "",
                        calls, m.size, baseline_label=NAIVE, better="lower",
                        target="1 per refresh",
                        ok=max(m.status_calls) == 1 and max(m.refresh_calls) == 1))
        rows.append(row(f"`hpceval status` wall time, {m.size} jobs ({shape})", "ms",
                        round(m.status_ms, 1), round(m.naive_ms, 1), baseline_label=NAIVE
                        + scaled, better="lower"))
        rows.append(row(f"in-process refresh, {m.size} jobs ({shape})", "ms",
                        round(m.refresh_ms, 1), round(m.bare_ms, 1),
                        baseline_label="floor: one bare sacct for the same jobs"))
    limited = max(m.rate_limited_calls for m in results)
    rows.append(row("sacct calls by a second refresh within min_interval_s (2 s)", "", limited,
                    target="0", ok=limited == 0))
    if cached_calls is not None:
        rows.append(row("Slurm calls by `hpceval status` once every job ended (cached)", "",
                        cached_calls, target="0", ok=cached_calls == 0))
    print(f"\nA second refresh within 2 s made {limited} sacct call(s); after every job ended, "
          f"`hpceval status` made {cached_calls} Slurm call(s) (terminal states cached).")
    states = sorted({s for m in results for s in m.states})
    notes = [
        "Jobs are real, submitted by hpceval's submit path with `--hold` so none runs; every "
        "job is cancelled at the end. Runs live on tmpfs (/dev/shm) when it is writable.",
        f"Every model was reported as: {', '.join(states)} (sacct answered for every job).",
        f"Naive polling is timed on up to {cap} jobs per size and scaled linearly to N.",
        "`hpceval status` wall time includes the Python start-up and reading the run "
        "directories; the in-process refresh is `Tracker.refresh(force=True)`.",
        "Submitting (config, render, write, sbatch --hold, record) took: " + ", ".join(
            f"{what} {seconds:.1f} s" for what, seconds in setup.items()) + ".",
    ]
    series: dict[str, Any] = {}
    for layout in ("sweep", "runs"):
        chosen = [m for m in results if m.layout == layout]
        if chosen:
            series[f"hpceval status ms ({shapes[layout]})"] = {
                "x": [m.size for m in chosen], "y": [round(m.status_ms, 1) for m in chosen],
                "x_label": "jobs"}
            series[f"naive polling ms ({shapes[layout]})"] = {
                "x": [m.size for m in chosen], "y": [round(m.naive_ms, 1) for m in chosen],
                "x_label": "jobs"}
    write_result(json_path, name="status", title="Status refresh cost vs. number of jobs",
                 command=command_line("status_refresh.py"), rows=rows, notes=notes,
                 series=series)


if __name__ == "__main__":
    main()
