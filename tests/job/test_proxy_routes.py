"""Per-task interceptor chains: a task asks the proxy under /task/<task key>/ and gets its own
chain there (NeMo Evaluator's one adapter per task), and the response cache keys on the chain."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from proxy_fakes import FakeUpstream, chat, running_proxy, running_upstreams

from hpceval.interceptors import chain_json, request_chain, routes_from_json, routes_json
from hpceval.interceptors.add_params import AddParams
from hpceval.interceptors.log_requests import LogRequests
from hpceval.interceptors.strip_reasoning import StripReasoning
from hpceval.interceptors.system_prompt import SystemPrompt
from hpceval.job.cache import request_key
from hpceval.job.interceptors import Routes
from hpceval.job.proxy.cli import build_parser, config_from_args
from hpceval.job.proxy.config import ProxyConfig

MakeConfig = Callable[..., ProxyConfig]
CHAT = "/v1/chat/completions"


async def post(base: str, path: str, body: dict[str, Any]) -> tuple[int, Any, str]:
    async with aiohttp.ClientSession() as s, s.post(base + path, json=body) as r:
        return r.status, await r.json(), r.headers.get("X-Hpceval-Cache", "")


def system_of(body: dict[str, Any]) -> str | None:
    first = body["messages"][0]
    return first["content"] if first["role"] == "system" else None


async def test_each_task_route_gets_its_own_chain(make_config: MakeConfig,
                                                  tmp_path: Path) -> None:
    """The same request through the job's path and two tasks' routes reaches the server with
    each one's changes; answers get each route's response stage; the log names the task."""
    up = FakeUpstream(reply=lambda _b, n: f"<think>t{n}</think>a{n}")
    tasks = (("lm-eval.ifeval", (SystemPrompt("/no_think"), LogRequests(1))),
             ("simple_evals.mmlu_pro", (SystemPrompt("/think"), StripReasoning(True))))
    async with running_upstreams(up) as urls, running_proxy(make_config(
            urls, interceptors=(SystemPrompt("run-wide"),),
            task_interceptors=tasks)) as (_, base):
        question = chat("q", temperature=0)
        plain = await post(base, CHAT, question)
        ifeval = await post(base, "/task/lm-eval.ifeval" + CHAT, question)
        ifeval_again = await post(base, "/task/lm-eval.ifeval" + CHAT, chat("q2", temperature=0))
        mmlu = await post(base, "/task/simple_evals.mmlu_pro" + CHAT, question)
        assert [system_of(b) for b in up.bodies] == ["run-wide", "/no_think", "/no_think",
                                                     "/think"]
        assert all(r[0] == 200 and r[2] == "miss" for r in (plain, ifeval, ifeval_again, mmlu))
        # the response stage is the route's: only mmlu_pro strips the trace
        assert plain[1]["choices"][0]["message"]["content"] == "<think>t1</think>a1"
        assert mmlu[1]["choices"][0]["message"] == {"role": "assistant", "content": "a4",
                                                    "reasoning_content": "t4"}
        # the other OpenAI paths work under a route, without the prefix upstream
        async with aiohttp.ClientSession() as s:
            async with s.get(base + "/task/lm-eval.ifeval/v1/models") as r:
                assert r.status == 200 and (await r.json())["data"] == [{"id": "m"}]
            async with s.post(base + "/task/lm-eval.ifeval/tokenize?x=1", json={"p": 1}) as r:
                assert (await r.json())["echo"] == {"p": 1}
            # a task without a chain of its own gets the job's; a route alone is not served
            async with s.post(base + "/task/other" + CHAT, json=question) as r:
                assert r.status == 200 and r.headers["X-Hpceval-Cache"] == "hit"  # plain's
            async with s.post(base + "/task/lm-eval.ifeval", json=question) as r:
                assert r.status == 404
        assert up.hits == 4
    # log_requests of the ifeval route only: its first pair, with the task's key
    logged = [json.loads(line) for line in (tmp_path / "proxy-requests.jsonl").open()]
    assert [(e["task"], system_of(e["request"])) for e in logged] == [
        ("lm-eval.ifeval", "/no_think")]


async def test_cache_keys_on_the_chain(make_config: MakeConfig) -> None:
    """Two tasks whose chains change requests differently never share an answer, even where
    the bodies that reach the server are the same; the same chain (or one that changes no
    request) shares them, and a resumed proxy replays each route's own."""
    up = FakeUpstream()
    prompted = {"model": "m", "temperature": 0,
                "messages": [{"role": "system", "content": "S"},
                             {"role": "user", "content": "q"}]}
    bare = {"model": "m", "temperature": 0, "messages": [{"role": "user", "content": "q"}]}
    tasks = (("a", (SystemPrompt("S"),)), ("a-twin", (SystemPrompt("S"),)),
             ("reasoning", (StripReasoning(True),)))
    async with running_upstreams(up) as urls:
        config = make_config(urls, task_interceptors=tasks)
        async with running_proxy(config) as (_, base):
            # task a's chain adds the system prompt; the job's path gets it from the harness
            assert (await post(base, "/task/a" + CHAT, bare))[2] == "miss"
            _, answer, hit = await post(base, CHAT, prompted)
            assert hit == "miss" and up.hits == 2  # same body upstream, another chain
            assert up.bodies[0] == up.bodies[1] == prompted
            assert (await post(base, "/task/a-twin" + CHAT, bare))[2] == "hit"  # the same chain
            # a chain that changes no request shares the job path's answers
            _, replay, hit = await post(base, "/task/reasoning" + CHAT, prompted)
            assert hit == "hit" and replay["id"] == answer["id"]
        async with running_proxy(config) as (_, base):  # a resumed job
            assert (await post(base, "/task/a" + CHAT, bare))[2] == "hit"
            assert (await post(base, CHAT, prompted))[1]["id"] == answer["id"]
        assert up.hits == 2


def test_cache_key_carries_only_the_request_stage() -> None:
    body = chat("q", temperature=0)
    assert request_chain(()) == request_chain((StripReasoning(True), LogRequests(3))) == ""
    chain = request_chain((SystemPrompt("S"), StripReasoning(True)))
    assert chain == chain_json((SystemPrompt("S"),))
    assert request_key(CHAT, body, "") == request_key(CHAT, body)  # earlier caches stay valid
    assert request_key(CHAT, body, chain) != request_key(CHAT, body)
    assert request_key(CHAT, body, chain) != request_key(
        CHAT, body, request_chain((SystemPrompt("T"),)))


def test_routes_travel_as_json_and_are_checked() -> None:
    routes = {"lm-evaluation-harness.ifeval": (SystemPrompt("-- 'x' $HOME"), LogRequests(2)),
              "t-2": (AddParams({"a.b": 1}),)}
    assert routes_from_json(routes_json(routes)) == routes
    args = build_parser().parse_args(["--port", "1", "--upstream", "http://h:1", "--cache-dir",
                                      "c", "--progress-file", "p",
                                      f"--task-interceptors={routes_json(routes)}"])
    config = config_from_args(args)
    assert dict(config.task_interceptors) == routes
    assert config.log_limits == {"": 0, "lm-evaluation-harness.ifeval": 2, "t-2": 0}
    for text, words in (('{"a b": []}', "is not a task key"), ("[]", "must be a JSON object"),
                        ('{"t": [{"name": "nope"}]}', "unknown interceptor"),
                        ('{"t": [{"name": "add_params", "config": {"add_params": {"a b": 1}}}]}',
                         "is not a request field name")):
        with pytest.raises(ValueError, match=words):
            routes_from_json(text)
    chain = Routes((SystemPrompt("run"),), routes).chain
    assert chain("t-2").route == "t-2" and chain("t-2").request == (AddParams({"a.b": 1}),)
    assert chain("t-3") == chain(None) and chain(None).request == (SystemPrompt("run"),)
