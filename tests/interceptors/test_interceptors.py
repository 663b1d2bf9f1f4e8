"""Each interceptor does what it says, the chain travels as JSON, and the proxy builds it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hpceval.config.schema import InterceptorsSpec
from hpceval.interceptors import chain_from_json, chain_json, interceptor_classes
from hpceval.interceptors.add_params import AddParams
from hpceval.interceptors.remove_params import RemoveParams
from hpceval.interceptors.rename_params import RenameParams
from hpceval.interceptors.strip_reasoning import StripReasoning, split_reasoning
from hpceval.interceptors.system_prompt import SystemPrompt
from hpceval.job.interceptors import RequestLog, build_interceptors
from hpceval.job.proxy.config import ProxyConfig

CHAT = "/v1/chat/completions"


def chat_body(*messages: dict[str, str], **params: Any) -> dict[str, Any]:
    return {"model": "m", "messages": list(messages), **params}


def test_system_prompt_inserted_or_replaced_chat_only() -> None:
    inject = SystemPrompt("S")
    body = chat_body({"role": "user", "content": "q"})
    inject.on_request(CHAT, body)
    assert body["messages"] == [{"role": "system", "content": "S"},
                                {"role": "user", "content": "q"}]
    body = chat_body({"role": "system", "content": "old"}, {"role": "user", "content": "q"})
    inject.on_request(CHAT, body)
    assert body["messages"][0] == {"role": "system", "content": "S"} and len(body["messages"]) == 2
    completion = {"model": "m", "prompt": "p"}
    inject.on_request("/v1/completions", completion)
    assert completion == {"model": "m", "prompt": "p"}


def test_params_add_remove_rename_with_dotted_names() -> None:
    body: dict[str, Any] = {"max_completion_tokens": 5, "logprobs": True, "top_p": 0.9,
                            "extra": {"a": 1}}
    RenameParams({"max_completion_tokens": "max_tokens", "missing": "x"}).on_request("", body)
    RemoveParams(["logprobs", "extra.a", "not.there"]).on_request("", body)
    AddParams({"top_p": 1.0, "stop": ["\n"], "chat_template_kwargs.enable_thinking": False}
              ).on_request("", body)
    assert body == {"max_tokens": 5, "top_p": 1.0, "extra": {}, "stop": ["\n"],
                    "chat_template_kwargs": {"enable_thinking": False}}
    add = AddParams({"stop": ["\n"]})
    other: dict[str, Any] = {}
    add.on_request("", other)
    other["stop"].append("x")  # a later mutation must not leak into the next request
    again: dict[str, Any] = {}
    add.on_request("", again)
    assert again == {"stop": ["\n"]}


@pytest.mark.parametrize(("text", "expected"), [
    ("<think>plan</think>\n\nAnswer: 4", ("plan", "Answer: 4")),
    ("plan only closed</think>4", ("plan only closed", "4")),  # start marker in the template
    ("no reasoning here", (None, "no reasoning here")),
    ("<think>ran out of tokens", ("ran out of tokens", "")),  # unfinished: no answer
])
def test_split_reasoning(text: str, expected: tuple[str | None, str]) -> None:
    assert split_reasoning(text, "<think>", "</think>") == expected


def test_strip_reasoning_chat_and_completions_custom_markers() -> None:
    strip = StripReasoning(True, "[R]", "[/R]")
    chat: dict[str, Any] = {"choices": [
        {"message": {"role": "assistant", "content": "[R]why[/R] yes"}},
        {"message": {"role": "assistant", "content": None}}]}
    assert strip.on_response(CHAT, chat)
    assert chat["choices"][0]["message"] == {"role": "assistant", "content": "yes",
                                             "reasoning_content": "why"}
    completion = {"choices": [{"text": "why[/R]no"}]}
    assert strip.on_response("/v1/completions", completion)
    assert completion["choices"][0] == {"text": "no", "reasoning_content": "why"}
    plain = {"choices": [{"message": {"content": "just text"}}]}
    assert not strip.on_response(CHAT, plain)


def test_the_spec_chain_orders_rename_remove_add_system_and_round_trips_as_json() -> None:
    spec = InterceptorsSpec(system_prompt="S", rename_params={"a": "b"}, remove_params=["b"],
                            add_params={"b": 2}, strip_reasoning=True, log_requests=3)
    chain = spec.chain()
    assert [i.name for i in chain] == ["rename_params", "remove_params", "add_params",
                                       "system_prompt", "strip_reasoning", "log_requests"]
    again = chain_from_json(chain_json(chain))
    assert again == chain  # the proxy rebuilds the very same declarations
    config = ProxyConfig(upstreams=("http://x:1",), interceptors=again)
    built = build_interceptors(config.interceptors)
    body = chat_body({"role": "user", "content": "q"}, a=1)
    built.on_request(CHAT, body)
    assert body["b"] == 2 and "a" not in body and body["messages"][0]["role"] == "system"
    assert [i.name for i in built.response] == ["strip_reasoning"]
    assert config.log_requests == 3
    assert build_interceptors(ProxyConfig(upstreams=("http://x:1",)).interceptors).request == ()
    assert InterceptorsSpec().chain() == () and not InterceptorsSpec().changes_requests
    assert not InterceptorsSpec(log_requests=2).changes_requests


def test_the_schema_keys_are_the_interceptors_own() -> None:
    import dataclasses

    keys = [f.name for f in dataclasses.fields(InterceptorsSpec)]
    assert keys == [f.name for cls in interceptor_classes() for f in dataclasses.fields(cls)]
    assert keys == ["system_prompt", "strip_reasoning", "reasoning_start", "reasoning_end",
                    "add_params", "remove_params", "rename_params", "log_requests"]


@pytest.mark.parametrize(("text", "message"), [
    ("{", "not JSON"), ('{"name": "x"}', "JSON list"), ('[{"name": "shout"}]',
                                                        "unknown interceptor 'shout'"),
    ('[{"name": "add_params", "config": {"add": {}}}]', "add_params"),
    ('[{"name": "strip_reasoning", "config": {"strip_reasoning": true, "reasoning_end": ""}}]',
     "reasoning_end: must not be empty"),
    ('[{"name": "remove_params", "config": {"remove_params": ["a b"]}}]',
     "not a request field name"),
])
def test_a_bad_chain_is_refused_naming_the_problem(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        chain_from_json(text)


def test_request_log_keeps_only_first_n(tmp_path: Path) -> None:
    log = RequestLog(tmp_path / "log" / "r.jsonl", limit=2)
    for n in range(5):
        log.record(CHAT, {"n": n}, 200, json.dumps({"answer": n}).encode(), False, 0.01)
    log.record(CHAT, {"n": 9}, 200, b"not json", True, 0.01)
    lines = [json.loads(x) for x in (tmp_path / "log" / "r.jsonl").read_text().splitlines()]
    assert [x["request"]["n"] for x in lines] == [0, 1]
    assert lines[0]["response"] == {"answer": 0} and lines[0]["status"] == 200
    log.close()
