"""The adaptive in-flight budget against a SIMULATED continuous-batching server (not vLLM).

    .venv/bin/python benchmarks/budget_sim.py [--seconds 60] [--quick]

A simulator, documented as one: each instance runs decode steps; every running request gets one
token per step and a step takes ``t0 + t1 x running`` seconds, so throughput rises with the
batch. The KV cache holds ``kv_seqs`` requests: past it, vLLM preempts and recomputes, modelled
as a step ``1 + preempt x (running - kv_seqs) / kv_seqs`` times longer, so throughput falls and
latency rises past the knee. Up to ``max_num_seqs`` requests run, the rest wait inside the
server (``vllm:num_requests_waiting``). A request whose time at the server passes the proxy's
upstream timeout is a timeout (aborted, sent again). Clients: 4 tasks, each keeping
``parallelism`` requests open (closed loop). The proxy admits ``budget x instances`` requests
(least-outstanding instance first) and queues the rest; the budget is either fixed or
hpceval.job.proxy.budget.AimdLimit fed with each completion and, every 0.5 s, the server's metrics.

Baseline, in the same run: every fixed budget from 1 to 256 per instance; the best one is the
reference. Goal (issue 22): adaptive throughput within 10 % of the best fixed, no timeouts, for
1, 4 and 8 instances. Takes about a minute (20 s with --quick).
"""

from __future__ import annotations

import argparse
import collections
import heapq
import random
from dataclasses import dataclass, field
from typing import Any

from report_json import add_json_option, command_line, row, write_result

from hpceval.job.proxy.budget import AimdLimit

FIXED = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 256)


@dataclass
class Server:
    t0: float = 0.010
    t1: float = 0.0004
    kv_seqs: int = 48
    max_num_seqs: int = 256
    preempt: float = 1.0
    running: list[list[float]] = field(default_factory=list)  # [tokens left, sent at]
    waiting: collections.deque[list[float]] = field(default_factory=collections.deque)
    busy: bool = False

    def step_time(self) -> float:
        n = len(self.running)
        slow = 1.0 + self.preempt * max(0, n - self.kv_seqs) / self.kv_seqs
        return (self.t0 + self.t1 * n) * slow


def simulate(instances: int, budget: AimdLimit, *, seconds: float, tasks: int = 4,
             parallelism: int = 256, timeout_s: float = 20.0, seed: int = 1) -> dict[str, Any]:
    rng = random.Random(seed)
    servers = [Server() for _ in range(instances)]
    outstanding = [0] * instances
    queue: collections.deque[float] = collections.deque()  # proxy queue: arrival times
    events: list[tuple[float, int, int]] = []  # (time, seq, instance): a step ends
    seq = 0
    now = 0.0
    done = timeouts = 0
    idle_time = 0.0
    inside = 0

    def admit() -> None:
        nonlocal inside, seq
        while queue and inside < budget.value * instances:
            queue.popleft()
            i = min(range(instances), key=lambda k: outstanding[k])
            outstanding[i] += 1
            inside += 1
            s = servers[i]
            s.waiting.append([float(rng.randint(32, 96)), now])
            if not s.busy:
                s.busy = True
                start_step(i)

    def start_step(i: int) -> None:
        nonlocal seq
        s = servers[i]
        while s.waiting and len(s.running) < s.max_num_seqs:
            s.running.append(s.waiting.popleft())
        if not s.running:
            s.busy = False
            return
        seq += 1
        heapq.heappush(events, (now + s.step_time(), seq, i))

    def finish(i: int, latency: float, outcome: str) -> None:
        nonlocal inside, done, timeouts
        outstanding[i] -= 1
        inside -= 1
        budget.on_result(latency, outcome)  # type: ignore[arg-type]
        if outcome == "ok":
            done += 1
        else:
            timeouts += 1
        queue.append(now)  # closed loop: the task sends its next request (or the retry)

    for _ in range(tasks * parallelism):
        queue.append(0.0)
    admit()
    next_metrics = 0.5
    last_busy_check = 0.0
    while events and now < seconds:
        t, _, i = heapq.heappop(events)
        busy_now = sum(1 for s in servers if s.running)
        idle_time += (t - last_busy_check) * (instances - busy_now) / instances
        last_busy_check = t
        now = t
        s = servers[i]
        kept: list[list[float]] = []
        for req in s.running:
            req[0] -= 1
            if req[0] <= 0:
                finish(i, now - req[1], "ok")
            elif now - req[1] > timeout_s:
                finish(i, now - req[1], "timeout")
            else:
                kept.append(req)
        s.running = kept
        still: collections.deque[list[float]] = collections.deque()
        for req in s.waiting:
            if now - req[1] > timeout_s:
                finish(i, now - req[1], "timeout")
            else:
                still.append(req)
        s.waiting = still
        if now >= next_metrics:
            next_metrics += 0.5
            budget.on_metrics(sum(len(x.waiting) for x in servers),
                              sum(len(x.running) for x in servers),
                              max(len(x.running) / x.kv_seqs for x in servers))
        admit()
        start_step(i)
        for k, other in enumerate(servers):
            if not other.busy and (other.waiting or other.running):
                other.busy = True
                start_step(k)
    return {"throughput": done / now if now else 0.0, "timeouts": timeouts,
            "final_limit": budget.value, "idle_share": idle_time / now if now else 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="simulated seconds per run")
    parser.add_argument("--quick", action="store_true", help="20 simulated seconds per run")
    add_json_option(parser)
    args = parser.parse_args()
    seconds = 20.0 if args.quick else args.seconds
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    print("| instances | adaptive req/s | final budget | timeouts | best fixed | its req/s | "
          "ratio | fixed 256 req/s (timeouts) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    for instances in (1, 4, 8):
        fixed = {n: simulate(instances, AimdLimit(limit=n, fixed=True), seconds=seconds)
                 for n in FIXED}
        best_n = max(fixed, key=lambda n: fixed[n]["throughput"])
        best = fixed[best_n]
        adaptive = simulate(instances, AimdLimit(), seconds=seconds)
        share = adaptive["throughput"] / best["throughput"]
        top = fixed[FIXED[-1]]
        print(f"| {instances} | {adaptive['throughput']:.0f} | {adaptive['final_limit']} | "
              f"{adaptive['timeouts']} | {best_n} | {best['throughput']:.0f} | {share:.3f} | "
              f"{top['throughput']:.0f} ({top['timeouts']}) |")
        rows.append(row(f"simulated throughput, adaptive budget, {instances} instance(s)",
                        "req/s", round(adaptive["throughput"], 1),
                        round(best["throughput"], 1),
                        baseline_label=f"best fixed budget ({best_n} per instance)",
                        better="higher", target=">= 0.9x", ok=share >= 0.9))
        rows.append(row(f"timeouts, adaptive budget, {instances} instance(s)", "requests",
                        adaptive["timeouts"], top["timeouts"],
                        baseline_label="fixed budget 256 per instance", better="lower",
                        target="0", ok=adaptive["timeouts"] == 0, with_ratio=False))
        notes.append(f"{instances} instance(s), fixed budgets: " + ", ".join(
            f"{n}: {r['throughput']:.0f} req/s ({r['timeouts']} timeouts)"
            for n, r in fixed.items()))
    notes.append(f"Simulator, not vLLM: {seconds:g} simulated s per run, 4 tasks x parallelism "
                 "256, KV cache 48 sequences per instance, upstream timeout 20 s.")
    for note in notes:
        print(f"- {note}")
    write_result(args.json, name="budget_sim", title="Adaptive in-flight budget (simulator)",
                 command=command_line("budget_sim.py"), rows=rows, notes=notes)


if __name__ == "__main__":
    main()
