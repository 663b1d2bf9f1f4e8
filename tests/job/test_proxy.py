"""The proxy end to end on real sockets: balancing, failover, retries, cache, progress file."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import aiohttp
from proxy_fakes import FakeUpstream, chat, dead_url, running_proxy, running_upstreams

from hpceval.config.schema import InterceptorsSpec
from hpceval.job.proxy.config import ProxyConfig

MakeConfig = Callable[..., ProxyConfig]


async def post(base: str, body: dict[str, Any], path: str = "/v1/chat/completions"
               ) -> tuple[int, dict[str, Any], str]:
    async with aiohttp.ClientSession() as s, s.post(base + path, json=body) as r:
        return r.status, await r.json(), r.headers.get("X-Hpceval-Cache", "")


def content(answer: dict[str, Any]) -> str:
    return str(answer["choices"][0]["message"]["content"])


async def test_concurrent_requests_are_spread_by_outstanding_count(
        make_config: MakeConfig) -> None:
    a, b = FakeUpstream(delay=0.3), FakeUpstream(delay=0.3)
    async with running_upstreams(a, b) as urls, running_proxy(make_config(urls)) as (_, base):
        results = await asyncio.gather(*(post(base, chat(f"q{i}")) for i in range(8)))
    assert all(status == 200 for status, _, _ in results)
    assert (a.hits, b.hits) == (4, 4)


async def test_least_loaded_instance_gets_the_next_request(make_config: MakeConfig) -> None:
    slow, fast = FakeUpstream(delay=0.5), FakeUpstream()
    async with running_upstreams(slow, fast) as urls, \
            running_proxy(make_config(urls)) as (server, base):
        hold = asyncio.ensure_future(post(base, chat("long")))  # occupies one instance
        while not any(i.outstanding for i in server.balancer.instances):
            await asyncio.sleep(0.01)
        busy = next(i for i in server.balancer.instances if i.outstanding)
        for i in range(5):
            assert (await post(base, chat(f"q{i}")))[0] == 200
        idle = next(i for i in server.balancer.instances if i is not busy)
        assert idle.done == 5 and busy.done == 0
        await hold


async def test_dead_upstream_is_skipped_and_request_succeeds(make_config: MakeConfig) -> None:
    live = FakeUpstream()
    async with running_upstreams(live) as urls:
        config = make_config([dead_url(), *urls], max_retries=0)
        async with running_proxy(config) as (server, base):
            for i in range(4):
                status, answer, _ = await post(base, chat(f"q{i}"))
                assert status == 200 and content(answer).startswith("answer")
            dead = server.balancer.instances[0]
            assert not dead.up and "cannot connect" in (dead.last_error or "")
    assert live.hits == 4


async def test_dropped_connection_moves_on_and_instance_stays_up(
        make_config: MakeConfig) -> None:
    a, b = FakeUpstream(), FakeUpstream()
    a.drop = 1  # the first request goes to the first instance, which drops it
    async with running_upstreams(a, b) as urls, \
            running_proxy(make_config(urls, max_retries=0)) as (server, base):
        status, answer, _ = await post(base, chat())
        await asyncio.sleep(0.1)  # the background /health check of the suspect
        assert status == 200 and content(answer).startswith("answer")
        assert all(i.up for i in server.balancer.instances)
        assert [i.failures for i in server.balancer.instances] == [1, 0]
    assert (a.hits, b.hits) == (1, 1)


async def test_body_that_is_not_a_json_object_is_refused(make_config: MakeConfig) -> None:
    up = FakeUpstream()
    async with running_upstreams(up) as urls, \
            running_proxy(make_config(urls)) as (server, base), aiohttp.ClientSession() as s:
        for data in (b"[1]", b"{not json"):
            async with s.post(base + "/v1/embeddings", data=data) as r:
                assert r.status == 400
        assert server.progress.failed == 2
    assert up.hits == 0


async def test_all_upstreams_dead_gives_503_with_reason_in_progress(
        make_config: MakeConfig) -> None:
    config = make_config([dead_url(), dead_url()], max_retries=1)
    async with running_proxy(config) as (_, base):
        status, answer, _ = await post(base, chat())
        async with aiohttp.ClientSession() as s, s.get(base + "/health") as r:
            health_status = r.status
    assert status == 503 and health_status == 503
    message = answer["error"]["message"]
    assert "all 2 upstream instances are down" in message and "cannot connect" in message
    progress = json.loads(config.progress_file.read_text())  # type: ignore[union-attr]
    assert progress["state"] == "stopped"
    assert progress["upstream_error"].startswith("all 2 upstream instances are down")
    assert progress["no_upstream"]["count"] == 1
    assert progress["requests"]["failed"] == 1
    assert [i["state"] for i in progress["instances"]] == ["down", "down"]


async def test_down_external_upstream_comes_back_after_its_probe(make_config: MakeConfig) -> None:
    """Only an API outside the job comes back; a job's own server is down for good (its port
    may be someone else's now: test_proxy_liveness)."""
    up = FakeUpstream()
    async with running_upstreams(up) as urls, \
            running_proxy(make_config(urls, external_upstream=True)) as (server, _):
        inst = server.balancer.instances[0]
        server.balancer.mark_down(inst, "test")
        for _ in range(100):
            if inst.up:
                break
            await asyncio.sleep(0.02)
        assert inst.up and inst.down_since is None


async def test_external_upstream_comes_back_without_a_health_route(
        make_config: MakeConfig) -> None:
    """An external API has no /health: any answer below 500 from /v1/models means it is up
    (a 401 included: the probe carries no key). A job's own server still needs /health 200."""
    api = FakeUpstream()
    api.health_status = 404
    for external, back in ((True, True), (False, False)):
        async with running_upstreams(api) as urls, \
                running_proxy(make_config(urls, external_upstream=external)) as (server, _):
            inst = server.balancer.instances[0]
            server.balancer.mark_down(inst, "test")
            for _ in range(25):
                if inst.up:
                    break
                await asyncio.sleep(0.02)
            assert inst.up is back


async def test_retries_5xx_then_succeeds(make_config: MakeConfig) -> None:
    flaky = FakeUpstream(fail=2)
    async with running_upstreams(flaky) as urls, \
            running_proxy(make_config(urls, max_retries=3)) as (_, base):
        status, answer, _ = await post(base, chat())
    assert status == 200 and content(answer) == "answer 3" and flaky.hits == 3


async def test_5xx_passed_through_when_retries_run_out_and_not_cached(
        make_config: MakeConfig) -> None:
    broken = FakeUpstream(fail=10, fail_status=500)
    async with running_upstreams(broken) as urls, \
            running_proxy(make_config(urls, max_retries=1)) as (server, base):
        assert (await post(base, chat()))[0] == 500
        assert (await post(base, chat()))[0] == 500
        assert server.cache is not None and len(server.cache) == 0
    assert broken.hits == 4  # 2 attempts each; the failure was never served from the cache


async def test_4xx_is_final_and_not_retried(make_config: MakeConfig) -> None:
    picky = FakeUpstream(fail=1, fail_status=400)
    async with running_upstreams(picky) as urls, running_proxy(make_config(urls)) as (_, base):
        assert (await post(base, chat()))[0] == 400
    assert picky.hits == 1


async def test_timeout_gives_504_but_healthy_instance_stays_up(make_config: MakeConfig) -> None:
    slow = FakeUpstream(delay=0.6)
    async with running_upstreams(slow) as urls:
        config = make_config(urls, request_timeout=0.2, max_retries=0)
        async with running_proxy(config) as (server, base):
            status, answer, _ = await post(base, chat())
            await asyncio.sleep(0.1)  # the background /health check of the suspect
            inst = server.balancer.instances[0]
            assert status == 504 and "timed out" in answer["error"]["message"]
            assert inst.up and inst.failures == 1


async def test_repeat_is_served_from_cache(make_config: MakeConfig) -> None:
    up = FakeUpstream()
    async with running_upstreams(up) as urls, running_proxy(make_config(urls)) as (_, base):
        first = await post(base, chat("same", temperature=0))
        second = await post(base, chat("same", temperature=0, stream=False, user="x"))
        other = await post(base, chat("same", temperature=0, max_tokens=5))
    assert first[2] == "miss" and second[2] == "hit" and other[2] == "miss"
    assert first[1] == second[1]
    assert up.hits == 2


async def test_repeated_sampled_requests_are_distinct_samples_and_resumable(
        make_config: MakeConfig) -> None:
    up = FakeUpstream()
    async with running_upstreams(up) as urls, running_proxy(make_config(urls)) as (_, base):
        a = await post(base, chat("pass@k", temperature=0.8))
        b = await post(base, chat("pass@k", temperature=0.8))
    assert content(a[1]) != content(b[1]) and up.hits == 2
    config = make_config([dead_url()], max_retries=0)
    async with running_proxy(config) as (_, base):  # resumed job, no server needed
        replay = [await post(base, chat("pass@k", temperature=0.8)) for _ in range(2)]
    assert [r[2] for r in replay] == ["hit", "hit"]
    assert {content(r[1]) for r in replay} == {content(a[1]), content(b[1])}


async def test_cache_survives_restart_without_upstream(make_config: MakeConfig) -> None:
    up = FakeUpstream()
    async with running_upstreams(up) as urls, running_proxy(make_config(urls)) as (_, base):
        done = [await post(base, chat(f"q{i}", temperature=0)) for i in range(3)]
        emb = await post(base, {"model": "m", "input": "x"}, "/v1/embeddings")
    async with running_proxy(make_config([dead_url()], max_retries=0)) as (server, base):
        again = [await post(base, chat(f"q{i}", temperature=0)) for i in range(3)]
        emb_again = await post(base, {"model": "m", "input": "x"}, "/v1/embeddings")
        fresh = await post(base, chat("never asked", temperature=0))
        assert server.cache is not None and server.cache.loaded_entries == 4
    assert [a[1] for a in again] == [d[1] for d in done] and emb_again[1] == emb[1]
    assert all(a[2] == "hit" for a in again) and fresh[0] == 503
    assert up.hits == 4


async def test_streaming_is_passed_through_and_not_cached(make_config: MakeConfig) -> None:
    up = FakeUpstream(reply=lambda _b, _n: "one two three")
    async with running_upstreams(up) as urls, running_proxy(make_config(urls)) as (server, base):
        for _ in range(2):
            async with aiohttp.ClientSession() as s, \
                    s.post(base + "/v1/chat/completions", json=chat(stream=True)) as r:
                assert r.status == 200
                assert r.headers["Content-Type"].startswith("text/event-stream")
                text = (await r.read()).decode()
            words = [json.loads(line[6:])["choices"][0]["delta"]["content"]
                     for line in text.split("\n\n") if line.startswith("data: {")]
            assert words == ["one", "two", "three"] and text.endswith("data: [DONE]\n\n")
        assert server.cache is not None and len(server.cache) == 0
        assert server.balancer.instances[0].outstanding == 0
    assert up.hits == 2


async def test_interceptors_applied_to_request_and_cached_response(
        make_config: MakeConfig) -> None:
    up = FakeUpstream(reply=lambda _b, _n: "<think>hmm</think> 42")
    async with running_upstreams(up) as urls:
        config = make_config(urls, interceptors=InterceptorsSpec(
            system_prompt="Be brief.", strip_reasoning=True,
            add_params={"max_tokens": 7, "chat_template_kwargs.enable_thinking": False},
            remove_params=["logprobs"], rename_params={"max_completion_tokens": "max_new"},
        ).chain())
        async with running_proxy(config) as (_, base):
            body = chat("q", logprobs=True, max_completion_tokens=3, temperature=0)
            fresh = await post(base, body)
            cached = await post(base, body)
    sent = up.bodies[0]
    assert sent["messages"][0] == {"role": "system", "content": "Be brief."}
    assert sent["max_tokens"] == 7 and sent["chat_template_kwargs"] == {"enable_thinking": False}
    assert "logprobs" not in sent and sent["max_new"] == 3 and "max_completion_tokens" not in sent
    for _, answer, _ in (fresh, cached):
        message = answer["choices"][0]["message"]
        assert message["content"] == "42" and message["reasoning_content"] == "hmm"
    assert cached[2] == "hit" and up.hits == 1


async def test_vllm_extras_and_models_are_passed_through(make_config: MakeConfig) -> None:
    up = FakeUpstream()
    async with running_upstreams(up) as urls, running_proxy(make_config(urls)) as (server, base):
        async with aiohttp.ClientSession() as s:
            async with s.get(base + "/v1/models") as r:
                assert r.status == 200 and (await r.json())["data"][0]["id"] == "m"
            async with s.post(base + "/tokenize", json={"prompt": "a b"}) as r:
                assert (await r.json())["echo"] == {"prompt": "a b"}
            async with s.get(base + "/tokenizer_info") as r:
                assert (await r.json())["tokenizer_class"] == "Fake"
            async with s.get(base + "/health") as r:
                assert r.status == 200 and (await r.json())["instances_up"] == 1
        assert server.progress.done == 0  # only generation requests are counted


async def test_progress_file_counts(make_config: MakeConfig) -> None:
    up = FakeUpstream(fail=1, fail_status=400)
    async with running_upstreams(up) as urls:
        config = make_config(urls, expected_requests=10)
        async with running_proxy(config) as (_, base):
            await post(base, chat("bad"))
            await post(base, chat("a", temperature=0))
            await post(base, chat("a", temperature=0))
            await asyncio.sleep(0.2)  # a periodic write while running
            running = json.loads(config.progress_file.read_text())  # type: ignore[union-attr]
    final = json.loads(config.progress_file.read_text())  # type: ignore[union-attr]
    assert running["state"] == "running" and final["state"] == "stopped"
    assert final["requests"] == {"done": 2, "cached": 1, "failed": 1, "in_flight": 0,
                                 "expected": 10}
    assert final["instances"][0]["url"] == urls[0] and final["instances"][0]["state"] == "up"
    assert final["cache"]["entries"] == 1 and final["upstream_error"] is None
    assert final["started"] <= final["updated"] and final["schema"] == 1
    # the busy time: three requests one after another, each counted from receipt to answer
    busy = final["busy"]
    assert 0 < busy["seconds"] <= busy["idle_at"] - busy["first_at"] + 0.002, busy
