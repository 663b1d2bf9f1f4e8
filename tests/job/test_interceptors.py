"""Each interceptor does what it says, and the chain is built from ProxyConfig."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hpceval.job.interceptors import (
    RequestLog,
    add_params,
    build_interceptors,
    remove_params,
    rename_params,
    split_reasoning,
    strip_reasoning,
    system_prompt,
)
from hpceval.job.proxy_config import ProxyConfig

CHAT = "/v1/chat/completions"


def chat_body(*messages: dict[str, str], **params: Any) -> dict[str, Any]:
    return {"model": "m", "messages": list(messages), **params}


def test_system_prompt_inserted_or_replaced_chat_only() -> None:
    inject = system_prompt("S")
    body = chat_body({"role": "user", "content": "q"})
    inject(CHAT, body)
    assert body["messages"] == [{"role": "system", "content": "S"},
                                {"role": "user", "content": "q"}]
    body = chat_body({"role": "system", "content": "old"}, {"role": "user", "content": "q"})
    inject(CHAT, body)
    assert body["messages"][0] == {"role": "system", "content": "S"} and len(body["messages"]) == 2
    completion = {"model": "m", "prompt": "p"}
    inject("/v1/completions", completion)
    assert completion == {"model": "m", "prompt": "p"}


def test_params_add_remove_rename_with_dotted_names() -> None:
    body: dict[str, Any] = {"max_completion_tokens": 5, "logprobs": True, "top_p": 0.9,
                            "extra": {"a": 1}}
    rename_params((("max_completion_tokens", "max_tokens"), ("missing", "x")))("", body)
    remove_params(("logprobs", "extra.a", "not.there"))("", body)
    add_params((("top_p", 1.0), ("stop", ["\n"]), ("chat_template_kwargs.enable_thinking", False)))(
        "", body)
    assert body == {"max_tokens": 5, "top_p": 1.0, "extra": {}, "stop": ["\n"],
                    "chat_template_kwargs": {"enable_thinking": False}}
    other: dict[str, Any] = {}
    add_params((("stop", ["\n"]),))("", other)
    other["stop"].append("x")  # a later mutation must not leak into the next request
    again: dict[str, Any] = {}
    add_params((("stop", ["\n"]),))("", again)
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
    strip = strip_reasoning("[R]", "[/R]")
    chat: dict[str, Any] = {"choices": [
        {"message": {"role": "assistant", "content": "[R]why[/R] yes"}},
        {"message": {"role": "assistant", "content": None}}]}
    assert strip(CHAT, chat)
    assert chat["choices"][0]["message"] == {"role": "assistant", "content": "yes",
                                             "reasoning_content": "why"}
    completion = {"choices": [{"text": "why[/R]no"}]}
    assert strip("/v1/completions", completion)
    assert completion["choices"][0] == {"text": "no", "reasoning_content": "why"}
    plain = {"choices": [{"message": {"content": "just text"}}]}
    assert not strip(CHAT, plain)


def test_build_from_config_orders_rename_remove_add_system() -> None:
    config = ProxyConfig(upstreams=("http://x:1",), system_prompt="S",
                         rename_params=(("a", "b"),), remove_params=("b",),
                         add_params=(("b", 2),), strip_reasoning=True)
    chain = build_interceptors(config)
    body = chat_body({"role": "user", "content": "q"}, a=1)
    chain.on_request(CHAT, body)
    assert body["b"] == 2 and "a" not in body and body["messages"][0]["role"] == "system"
    assert len(chain.response) == 1
    assert build_interceptors(ProxyConfig(upstreams=("http://x:1",))).request == ()


def test_request_log_keeps_only_first_n(tmp_path: Path) -> None:
    log = RequestLog(tmp_path / "log" / "r.jsonl", limit=2)
    for n in range(5):
        log.record(CHAT, {"n": n}, 200, json.dumps({"answer": n}).encode(), False, 0.01)
    log.record(CHAT, {"n": 9}, 200, b"not json", True, 0.01)
    lines = [json.loads(x) for x in (tmp_path / "log" / "r.jsonl").read_text().splitlines()]
    assert [x["request"]["n"] for x in lines] == [0, 1]
    assert lines[0]["response"] == {"answer": 0} and lines[0]["status"] == 200
    log.close()
