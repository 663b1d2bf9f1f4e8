"""The proxy's one reader of the servers' /metrics (hpceval.job.proxy.server_metrics) on real
sockets: the load series it writes beside progress.json (results.server_load), its token rates from
vLLM's counters, a restarted server, a server without /metrics, an external API; and the
budget still fed from the same polls."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from proxy_fakes import FakeUpstream, running_proxy, running_upstreams

from hpceval.contract import SERVER_LOAD_FILE
from hpceval.job.proxy.cli import build_parser, config_from_args
from hpceval.job.proxy.config import ProxyConfig
from hpceval.job.proxy.server_metrics import (
    LoadRecorder,
    Metrics,
    Throughput,
    parse_vllm_metrics,
    poll_interval,
)
from hpceval.results.server_load import load_server_load

MakeConfig = Callable[..., ProxyConfig]
FAST = 0.05  # seconds between polls in these tests


def vllm_text(waiting: float, running: float, kv: float, generated: float,
              prompt: float) -> str:
    """What vLLM's /metrics holds of the figures read (one engine), among lines not read."""
    return (
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        f'vllm:num_requests_waiting{{engine="0",model_name="smol"}} {waiting}\n'
        f'vllm:num_requests_running{{engine="0",model_name="smol"}} {running}\n'
        f'vllm:kv_cache_usage_perc{{engine="0",model_name="smol"}} {kv}\n'
        f'vllm:generation_tokens_total{{engine="0",model_name="smol"}} {generated}\n'
        f'vllm:generation_tokens_created{{engine="0",model_name="smol"}} 1.7e9\n'
        f'vllm:prompt_tokens_total{{engine="0",model_name="smol"}} {prompt}\n'
        'vllm:request_success_total{engine="0",finished_reason="stop"} 12.0\n'
        'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001"} 0.0\n')


def test_the_counters_are_parsed_in_the_same_pass() -> None:
    found = parse_vllm_metrics(vllm_text(2, 5, 0.3, 1000, 9000) + vllm_text(1, 1, 0.6, 10, 20))
    assert found == Metrics(waiting=3.0, running=6.0, kv=0.6, generation_tokens=1010.0,
                            prompt_tokens=9020.0)
    assert parse_vllm_metrics("vllm:generation_tokens_total NaN\n").generation_tokens is None


def test_rates_come_from_two_samples_of_one_instance_and_a_reset_gives_none() -> None:
    rates = Throughput()
    a, b = "http://a:1", "http://b:1"
    assert rates.rates(0.0, {a: Metrics(generation_tokens=100, prompt_tokens=1000)}) \
        == (None, None)  # the first sample: nothing to compare with
    assert rates.rates(2.0, {a: Metrics(generation_tokens=300, prompt_tokens=1000),
                             b: Metrics(generation_tokens=5)}) == (100.0, 0.0)
    # b's second sample, a restarted: only b's rate this step, a starts again from 10
    assert rates.rates(3.0, {a: Metrics(generation_tokens=10, prompt_tokens=50),
                             b: Metrics(generation_tokens=25)}) == (20.0, None)
    assert rates.rates(4.0, {a: Metrics(generation_tokens=40, prompt_tokens=150)}) \
        == (30.0, 100.0)
    assert rates.rates(5.0, {a: Metrics()}) == (None, None)  # no counters (not vLLM's names)


def test_the_recorder_sums_instances_and_keeps_the_highest_kv(tmp_path: Path) -> None:
    clock = iter([100.0, 105.0])
    recorder = LoadRecorder(tmp_path / SERVER_LOAD_FILE, 5.0, clock=lambda: next(clock),
                            monotonic=lambda: 0.0)
    recorder.write()  # no sample yet: no file
    assert load_server_load(str(tmp_path)).missing
    recorder({"a": Metrics(2, 4, 0.25, 10, 100), "b": Metrics(1, 3, 0.5, None, None)})
    recorder.write()
    found = load_server_load(str(tmp_path))
    assert found.facts is not None and found.facts["last"] == {
        "t": 100.0, "waiting": 3.0, "running": 7.0, "kv": 0.5, "gen_tps": None,
        "prompt_tps": None}


async def test_the_proxy_writes_the_load_series_beside_progress(make_config: MakeConfig,
                                                                tmp_path: Path) -> None:
    """Two instances, counters rising 50 generated and 400 prompt tokens per poll each; one
    restarts (its counters fall back) midway: the file keeps going, without a rate for it."""
    a, b = FakeUpstream(), FakeUpstream()
    a.metrics = lambda n: vllm_text(n % 3, 8, 0.25, 50 * n, 400 * n)
    b.metrics = lambda n: vllm_text(1, 4, 0.75 if n == 2 else 0.5,
                                    50 * (n if n < 6 else n - 5), 400 * n)
    async with running_upstreams(a, b) as urls, \
            running_proxy(make_config(urls, metrics_interval=FAST)) as (server, _base):
        assert server.load is not None
        while min(a.metrics_asked, b.metrics_asked) < 12:
            await asyncio.sleep(FAST)
    path = tmp_path / SERVER_LOAD_FILE
    assert server.load.path == path and path.is_file()
    found = load_server_load(str(tmp_path))
    assert found.problem is None and found.facts is not None
    facts = found.facts
    assert facts["samples"] >= 10 and facts["stride"] == 1
    assert facts["interval_s"] == FAST and len(facts["points"]) == facts["samples"]
    assert [row[2] for row in facts["points"]] == [12.0] * facts["samples"]  # 8 + 4 running
    assert facts["summary"]["kv"]["peak"] == 0.75 and facts["summary"]["running"]["mean"] == 12
    rates = [row[4] for row in facts["points"]]
    assert rates[0] is None and all(r is None or r > 0 for r in rates[1:])
    assert facts["summary"]["gen_tps"]["peak"] > 0 and facts["last"]["prompt_tps"] > 0


async def test_a_server_without_metrics_is_asked_once_and_gives_no_file(
        make_config: MakeConfig, tmp_path: Path) -> None:
    up = FakeUpstream()
    up.metrics, up.metrics_status = "not found", 404
    async with running_upstreams(up) as urls, \
            running_proxy(make_config(urls, metrics_interval=FAST)):
        await asyncio.sleep(FAST * 8)
    assert up.metrics_asked == 1
    assert load_server_load(str(tmp_path)).missing


async def test_an_external_api_is_not_polled(make_config: MakeConfig, tmp_path: Path) -> None:
    up = FakeUpstream()
    up.metrics = vllm_text(1, 1, 0.1, 1, 1)
    assert make_config(["http://127.0.0.1:9"], external_upstream=True).server_load_path is None
    async with running_upstreams(up) as urls, running_proxy(
            make_config(urls, metrics_interval=FAST, external_upstream=True)) as (server, _):
        await asyncio.sleep(FAST * 6)
    assert server.load is None and up.metrics_asked == 0
    assert load_server_load(str(tmp_path)).missing


async def test_the_adaptive_budget_reads_the_same_polls(make_config: MakeConfig) -> None:
    up = FakeUpstream()
    up.metrics = vllm_text(4, 8, 0.2, 10, 10)  # requests wait inside the server
    async with running_upstreams(up) as urls, running_proxy(
            make_config(urls, budget="adaptive", metrics_interval=FAST)) as (server, _):
        while up.metrics_asked < 3:
            await asyncio.sleep(FAST)
        assert server._forwarder is not None and server._forwarder.admission is not None
        limit = server._forwarder.admission.limit
        assert limit._metrics_seen and limit._queued
    assert server.load is not None and server.load.series.samples >= 2


def test_the_interval_is_a_setting_and_one_second_at_most_for_the_adaptive_budget(
        make_config: MakeConfig) -> None:
    url = ["http://127.0.0.1:9"]
    assert poll_interval(make_config(url)) == ProxyConfig.metrics_interval == 5.0
    assert poll_interval(make_config(url, budget="adaptive")) == 1.0
    assert poll_interval(make_config(url, budget="adaptive", metrics_interval=0.5)) == 0.5
    assert poll_interval(make_config(url, budget="4", metrics_interval=30)) == 30
    args = build_parser().parse_args(["--port", "1", "--upstream", url[0], "--cache-dir", "c",
                                      "--progress-file", "p/progress.json"])
    assert config_from_args(args).metrics_interval == ProxyConfig.metrics_interval
    args = build_parser().parse_args(["--port", "1", "--upstream", url[0], "--cache-dir", "c",
                                      "--progress-file", "p/progress.json",
                                      "--metrics-interval", "2.5"])
    config = config_from_args(args)
    assert config.metrics_interval == 2.5
    assert config.server_load_path == Path("p") / SERVER_LOAD_FILE
