"""The adaptive in-flight budget (hpceval.job.proxy.budget): the AIMD rule, the fair gate,
/metrics."""

from __future__ import annotations

import asyncio

import pytest

from hpceval.job.proxy.budget import Admission, AimdLimit, LimitLog
from hpceval.job.proxy.server_metrics import Metrics, parse_vllm_metrics


def window(limit: AimdLimit, latency: float = 1.0, outcome: str = "ok") -> None:
    for _ in range(limit.value):
        limit.on_result(latency, outcome)  # type: ignore[arg-type]


def test_slow_start_doubles_then_grows_by_one_after_the_first_cut() -> None:
    limit = AimdLimit(limit=4)
    window(limit)
    assert limit.value == 8
    window(limit)
    assert limit.value == 16
    limit.on_metrics(waiting=3, running=16)
    window(limit)
    assert limit.value == 14  # 16 x 0.9: the server queues, the batch is full
    window(limit)
    assert limit.value == 15  # additive from now on


def test_errors_and_timeouts_cut_by_half() -> None:
    for outcome in ("error", "timeout"):
        limit = AimdLimit(limit=32)
        limit.on_result(1.0, outcome)  # type: ignore[arg-type]
        window(limit)
        assert limit.value == 16, outcome


def test_full_kv_cache_is_a_queue_signal() -> None:
    limit = AimdLimit(limit=20, slow_start=False)
    limit.on_metrics(waiting=0, running=20, kv_usage=0.995)
    window(limit)
    assert limit.value == 18


def test_latency_counts_only_without_server_metrics() -> None:
    external = AimdLimit(limit=10, slow_start=False)
    window(external, latency=1.0)
    window(external, latency=5.0)  # 5x the best median: queueing somewhere
    assert external.value == 9
    served = AimdLimit(limit=10, slow_start=False)
    served.on_metrics(waiting=0, running=10)
    window(served, latency=1.0)
    window(served, latency=5.0)  # a fuller batch is slower per request: not a signal
    assert served.value == 12


def test_fixed_budget_never_moves_and_limits_stay_in_bounds() -> None:
    fixed = AimdLimit(limit=7, fixed=True)
    window(fixed, outcome="timeout")
    fixed.on_metrics(waiting=100, running=7)
    window(fixed)
    assert fixed.value == 7
    low = AimdLimit(limit=1, minimum=1)
    for _ in range(5):
        window(low, outcome="error")
    assert low.value == 1
    high = AimdLimit(limit=600, maximum=1024)
    window(high)
    assert high.value == 1024


def test_admission_caps_in_flight_and_is_fair_across_tasks() -> None:
    async def scenario() -> tuple[list[str], int]:
        gate = Admission(AimdLimit(limit=2, fixed=True), instances=1)
        order: list[str] = []
        peak = 0
        release = asyncio.Event()

        async def request(task: str) -> None:
            nonlocal peak
            async with gate.slot(task):
                order.append(task)
                peak = max(peak, gate.inside)
                await release.wait()

        # task "big" queues 6 requests before "small" queues 2: small must not wait for all 6
        jobs = [asyncio.create_task(request("big")) for _ in range(6)]
        await asyncio.sleep(0)
        jobs += [asyncio.create_task(request("small")) for _ in range(2)]
        await asyncio.sleep(0)
        release.set()
        await asyncio.gather(*jobs)
        return order, peak

    order, peak = asyncio.run(scenario())
    assert peak == 2
    assert order[:2] == ["big", "big"]  # admitted at once
    assert order[2:6] == ["big", "small", "big", "small"]  # then round-robin
    assert order.count("big") == 6 and order.count("small") == 2


def test_admission_capacity_follows_instances_and_a_cancelled_waiter_gives_back() -> None:
    async def scenario() -> int:
        gate = Admission(AimdLimit(limit=1, fixed=True), instances=2)
        assert gate.capacity == 2
        hold = asyncio.Event()

        async def request() -> None:
            async with gate.slot("t"):
                await hold.wait()

        first = [asyncio.create_task(request()) for _ in range(2)]
        await asyncio.sleep(0)
        waiter = asyncio.create_task(request())
        await asyncio.sleep(0)
        assert gate.waiting == 1
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert gate.waiting == 0
        hold.set()
        await asyncio.gather(*first)
        return gate.inside

    assert asyncio.run(scenario()) == 0


METRICS = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="smol"} 12.0
vllm:num_requests_running{engine="1",model_name="smol"} 4.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
vllm:num_requests_waiting{engine="0",model_name="smol"} 3.0
vllm:num_requests_waiting_by_reason{engine="0",reason="capacity"} 99.0
vllm:kv_cache_usage_perc{engine="0",model_name="smol"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="smol"} 0.5
vllm:num_requests_waiting{engine="1",model_name="smol"} not-a-number
"""


def test_vllm_metrics_are_summed_over_engines() -> None:
    assert parse_vllm_metrics(METRICS) == Metrics(waiting=3.0, running=16.0, kv=0.5)
    assert parse_vllm_metrics("") == Metrics(0.0, 0.0, None, None, None)


def test_the_limit_is_logged_when_it_moves_at_most_once_per_interval() -> None:
    limit, shown = AimdLimit(limit=4), LimitLog(every=10.0)
    first = shown.note(limit, 0.0, 2)
    assert first == "in-flight budget: 4 per instance (8 in all, 0 cut(s) so far)"
    assert shown.note(limit, 5.0, 2) is None  # unchanged: no line
    limit.limit = 8
    assert shown.note(limit, 8.0, 2) is None  # changed, but within 10 s of the last line
    later = shown.note(limit, 10.0, 2)  # the first completion after the interval
    assert later == "in-flight budget: 8 per instance (16 in all, 0 cut(s) so far)"
    assert shown.note(limit, 30.0, 2) is None  # logged already
    assert LimitLog().note(AimdLimit(limit=12, fixed=True), 0.0, 1) is None  # a fixed budget
