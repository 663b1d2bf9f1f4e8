"""A sweep element's judge proxy follows the sweep judge's successor job (hpceval.job.
judge_successor): two fake judges on loopback, the first dies mid-run (refused, or its
connections reset), and the judge's record (auxiliary/<name>/endpoint.json and token, as the
judge job writes them) is rewritten to the second with a new token. Only this user's own,
not group- or world-writable record redirects the proxy; without a successor within the bound
the request fails with a 503 that says so."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from proxy_fakes import FakeUpstream, chat, running_proxy, running_upstreams

from hpceval.contract import AUX_ENDPOINT_FILE, AUX_TOKEN_FILE
from hpceval.job.judge_endpoint import EndpointUntrusted, read_endpoint
from hpceval.job.proxy.cli import build_parser, config_from_args
from hpceval.job.proxy.config import ProxyConfig

MakeConfig = Callable[..., ProxyConfig]


def publish(folder: Path, url: str, token: str, job_id: str) -> None:
    """As the judge job does: token (0600) first, then endpoint.json, each renamed into place."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / ".token.tmp"
    tmp.write_text(token + "\n")
    tmp.chmod(0o600)
    tmp.replace(folder / AUX_TOKEN_FILE)
    tmp = folder / ".endpoint.json.tmp"
    tmp.write_text(json.dumps({"urls": [url], "model_id": "j", "job_id": job_id}))
    tmp.chmod(0o644)
    tmp.replace(folder / AUX_ENDPOINT_FILE)


async def post(base: str, body: dict[str, Any]) -> tuple[int, dict[str, Any], float]:
    started = time.monotonic()
    async with aiohttp.ClientSession() as s, \
            s.post(base + "/v1/chat/completions", json=body) as r:
        return r.status, await r.json(), time.monotonic() - started


def judge_config(make_config: MakeConfig, folder: Path, url: str, wait: float) -> ProxyConfig:
    return make_config([url], upstream_api_key="token-A", judge_dir=folder, judge_wait=wait,
                       max_retries=1)


@pytest.mark.parametrize("fault", ["refused", "reset"])
async def test_requests_follow_the_successor_and_its_token(
        make_config: MakeConfig, tmp_path: Path, fault: str) -> None:
    first, second = FakeUpstream(), FakeUpstream()
    folder = tmp_path / "auxiliary" / "judge"
    async with running_upstreams(first, second) as (url1, url2):
        publish(folder, url1, "token-A", "100")
        config = judge_config(make_config, folder, url1, wait=20)
        async with running_proxy(config) as (server, base):
            assert (await post(base, chat("q0")))[0] == 200
            assert first.headers[-1]["Authorization"] == "Bearer token-A"
            # the first judge's allocation ends mid-run: its record goes, it stops answering
            (folder / AUX_ENDPOINT_FILE).unlink()
            if fault == "refused":
                await first.stop()
            else:
                first.drop, first.health_status = 1000, 503
            waiting = [asyncio.ensure_future(post(base, chat(f"q{i}"))) for i in range(1, 4)]
            await asyncio.sleep(1.0)
            assert not any(w.done() for w in waiting), "requests failed instead of waiting"
            publish(folder, url2, "token-B", "101")  # the successor judge job is healthy
            results = await asyncio.gather(*waiting)
            assert [r[0] for r in results] == [200, 200, 200], results
            assert all(r[2] >= 1.0 for r in results)  # they waited for the successor
            assert (await post(base, chat("q4")))[0] == 200
            assert [i.url for i in server.balancer.instances] == [url2]
    assert second.hits == 4
    assert {h["Authorization"] for h in second.headers} == {"Bearer token-B"}
    assert {b["messages"][0]["content"] for b in second.bodies} == {"q1", "q2", "q3", "q4"}


async def test_a_new_token_on_the_same_address_is_followed_after_a_401(
        make_config: MakeConfig, tmp_path: Path) -> None:
    judge = FakeUpstream(fail=1, fail_status=401)  # a successor on the same node and port
    folder = tmp_path / "judge"
    async with running_upstreams(judge) as (url,):
        publish(folder, url, "token-A", "100")
        async with running_proxy(judge_config(make_config, folder, url, wait=5)) as (_, base):
            publish(folder, url, "token-B", "101")
            status, _, _ = await post(base, chat("q"))
    assert status == 200
    assert [h["Authorization"] for h in judge.headers] == ["Bearer token-A", "Bearer token-B"]


@pytest.mark.parametrize("case", ["group-writable", "world-writable", "other owner"])
async def test_a_record_another_user_could_write_never_redirects_the_run(
        make_config: MakeConfig, tmp_path: Path, case: str) -> None:
    if case == "other owner" and os.geteuid() != 0:
        pytest.skip("making a file another user owns needs root")
    first, planted = FakeUpstream(), FakeUpstream()
    folder = tmp_path / "judge"
    async with running_upstreams(first, planted) as (url1, url2):
        publish(folder, url1, "token-A", "100")
        async with running_proxy(judge_config(make_config, folder, url1, wait=1.5)) \
                as (_, base):
            await first.stop()
            publish(folder, url2, "token-B", "666")
            record = folder / AUX_ENDPOINT_FILE
            if case == "other owner":
                os.chown(record, 65534, 65534)
            else:
                record.chmod(0o664 if case == "group-writable" else 0o646)
            status, answer, _ = await post(base, chat("q"))
    assert planted.hits == 0
    assert status == 503
    message = answer["error"]["message"]
    assert "no successor published" in message
    assert ("owned by nobody (uid 65534)" if case == "other owner" else "writable by other users") \
        in message, message


async def test_no_successor_within_the_bound_fails_clearly(
        make_config: MakeConfig, tmp_path: Path) -> None:
    first = FakeUpstream()
    folder = tmp_path / "judge"
    async with running_upstreams(first) as (url1,):
        publish(folder, url1, "token-A", "100")
        async with running_proxy(judge_config(make_config, folder, url1, wait=1.5)) \
                as (server, base):
            await first.stop()
            (folder / AUX_ENDPOINT_FILE).unlink()
            status, answer, took = await post(base, chat("q1"))
            again, _, took_again = await post(base, chat("q2"))
            progress = server.snapshot()
    assert status == 503 and again == 503
    assert 1.5 <= took < 10
    assert took_again < 1.0, "a judge known to be gone made every later request wait again"
    message = answer["error"]["message"]
    assert "the sweep's judge is gone" in message and "within 1.5 s" in message, message
    assert str(folder / AUX_ENDPOINT_FILE) in message
    assert progress["requests"]["failed"] == 2  # counted, as `status` shows them
    assert progress["no_upstream"]["count"] == 2


def test_the_reader_keeps_the_token_out_of_its_repr(tmp_path: Path) -> None:
    publish(tmp_path, "http://n1:8000", "s3cret", "7")
    record = read_endpoint(tmp_path)
    assert record.urls == ("http://n1:8000",) and record.token == "s3cret"
    assert "s3cret" not in repr(record)
    (tmp_path / AUX_TOKEN_FILE).chmod(0o640)
    with pytest.raises(EndpointUntrusted, match="readable by other users"):
        read_endpoint(tmp_path)


def test_the_job_script_options_reach_the_config() -> None:
    base = ["--port", "0", "--upstream", "http://n1:8000", "--cache-dir", "/c",
            "--progress-file", "/p.json"]
    config = config_from_args(build_parser().parse_args(
        [*base, "--judge-dir", "/runs/r/auxiliary/judge", "--judge-wait", "3600"]))
    assert config.judge_dir == Path("/runs/r/auxiliary/judge") and config.judge_wait == 3600
    assert config_from_args(build_parser().parse_args(base)).judge_dir is None
    with pytest.raises(ValueError, match="judge_wait"):
        config_from_args(build_parser().parse_args([*base, "--judge-wait", "0"]))


async def test_a_slow_judge_is_not_taken_for_a_gone_one(
        make_config: MakeConfig, tmp_path: Path) -> None:
    slow = FakeUpstream(delay=1.0)
    folder = tmp_path / "judge"
    async with running_upstreams(slow) as (url,):
        publish(folder, url, "token-A", "100")
        config = make_config([url], upstream_api_key="token-A", judge_dir=folder,
                             judge_wait=20, max_retries=0, request_timeout=0.3)
        async with running_proxy(config) as (_, base):
            status, answer, took = await post(base, chat("q"))
    assert status == 504 and took < 5, (status, took)  # its timeout, not the 20 s wait
    assert "timed out" in answer["error"]["message"]


async def test_a_retry_that_lands_on_the_successor_carries_the_successors_token(
        make_config: MakeConfig, tmp_path: Path) -> None:
    """The race CI met: a request sent with judge A's token fails and is retried by the
    forwarder; meanwhile another request switched the proxy to successor B. The retry picks
    B's instance, and must take B's token there, not A's (each instance carries its judge's)."""
    first, second = FakeUpstream(), FakeUpstream()
    folder = tmp_path / "auxiliary" / "judge"
    async with running_upstreams(first, second) as (url1, url2):
        publish(folder, url1, "token-A", "100")
        config = judge_config(make_config, folder, url1, wait=20)
        async with running_proxy(config) as (server, base):
            assert server.judge is not None
            switched = asyncio.Event()
            first.fail, first.fail_status = 1, 503  # A answers the first try with a 503 ...
            original = server.balancer.pick

            def pick_after_switch() -> Any:
                # ... and before the retry picks, the successor's record is adopted
                if first.hits and not switched.is_set():
                    publish(folder, url2, "token-B", "101")
                    assert server.judge is not None
                    assert server.judge._adopt(server.judge._read())
                    switched.set()
                return original()

            server.balancer.pick = pick_after_switch  # type: ignore[method-assign]
            status, _, _ = await post(base, chat("q"))
            assert status == 200 and switched.is_set()
    assert [h["Authorization"] for h in first.headers] == ["Bearer token-A"]
    assert [h["Authorization"] for h in second.headers] == ["Bearer token-B"]
