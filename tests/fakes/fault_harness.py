#!/usr/bin/env python3
"""A cheap harness for fault drills: a few chat requests, an lm-eval style results file, and
faults switched on by a file the test controls (standard library only).

    fault_harness.py --output DIR --task NAME --endpoint URL --model ID
                     [--requests N] [--metrics M] [--fault-file FILE]

Without a fault it sends N chat requests (prompts name the task, so two tasks never share a
cached answer) and writes ``DIR/results_0.json``: ``answered`` (the fraction of requests that
got a 2xx answer, always 1.0 when it exits 0) and M more constant metrics ``m0..``, so a drill
can make hpceval's parsed ``results.json`` as large as it needs. Any failed request is fatal:
it prints why and exits 1, as a real harness gives up on a lost server.

The fault is read when the harness starts, from ``--fault-file`` (absent: no fault), so a drill
switches it off between a job and its resume by deleting the file. First line:

* ``exit N``: print a message and exit with status N before any request;
* ``hang``: print a message and sleep until killed (SIGTERM ends it, as most harnesses);
* ``wait PATH``: send nothing until PATH exists (at most 120 s, then exit 1), then run as
  without a fault: with tasks running concurrently, a drill orders their requests this way.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


def auth() -> dict[str, str]:
    """The key the in-job proxy asks for: the job gives it as OPENAI_API_KEY (never argv)."""
    key = os.environ.get("OPENAI_API_KEY")
    return {"Authorization": f"Bearer {key}"} if key else {}


def read_fault(path: Path | None) -> list[str]:
    if path is None or not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return lines[0].split() if lines else []


def ask(endpoint: str, model: str, prompt: str) -> None:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": prompt}],
                       "max_tokens": 16, "temperature": 0}).encode("utf-8")
    request = urllib.request.Request(endpoint, data=body,
                                     headers={"Content-Type": "application/json", **auth()})
    with urllib.request.urlopen(request, timeout=60) as response:
        reply = json.loads(response.read())
    if not reply.get("choices"):
        raise ValueError(f"no choices in {reply!r}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--output", type=Path, required=True)
    p.add_argument("--task", required=True)
    p.add_argument("--endpoint", required=True, help="chat completions URL")
    p.add_argument("--model", required=True)
    p.add_argument("--requests", type=int, default=3)
    p.add_argument("--metrics", type=int, default=0, help="extra constant metrics m0..")
    p.add_argument("--fault-file", type=Path)
    args = p.parse_args(argv)

    fault = read_fault(args.fault_file)
    if fault[:1] == ["exit"]:
        status = int(fault[1]) if len(fault) > 1 else 1
        print(f"fault_harness: injected failure ({args.fault_file}), exiting with status "
              f"{status}", flush=True)
        return status
    if fault[:1] == ["hang"]:
        print(f"fault_harness: injected hang ({args.fault_file})", flush=True)
        while True:
            time.sleep(3600)
    if fault[:1] == ["wait"] and len(fault) == 2:
        deadline = time.monotonic() + 120
        while not Path(fault[1]).exists():
            if time.monotonic() > deadline:
                print(f"fault_harness: {fault[1]} did not appear in 120 s", flush=True)
                return 1
            time.sleep(0.1)
        print(f"fault_harness: waited for {fault[1]}", flush=True)
    elif fault:
        print(f"fault_harness: unknown fault {fault!r} in {args.fault_file}", file=sys.stderr)
        return 2

    for i in range(args.requests):
        try:
            ask(args.endpoint, args.model, f"{args.task}: question {i}")
        except (OSError, ValueError, urllib.error.URLError) as exc:
            print(f"fault_harness: request {i + 1} of {args.requests} failed: {exc}",
                  flush=True)
            return 1
        print(f"fault_harness: request {i + 1} of {args.requests} answered", flush=True)
    metrics = {"answered,none": 1.0, **{f"m{j},none": j / 1000 for j in range(args.metrics)}}
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "results_0.json").write_text(json.dumps({"results": {args.task: metrics}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
