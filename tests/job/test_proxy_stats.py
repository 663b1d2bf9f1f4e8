"""Per-task runtime statistics on real sockets: /task/<key>/ routing and runtime.json."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from proxy_fakes import FakeUpstream, chat, running_proxy, running_upstreams

from hpceval.job.proxy_config import ProxyConfig
from hpceval.results.runtime import read_runtime

MakeConfig = Callable[..., ProxyConfig]


HITS: list[str] = []


async def _post(base: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s, s.post(base + path, json=body) as r:
        HITS.append(r.headers.get("X-Hpceval-Cache", ""))
        return r.status, await r.json()


async def test_task_prefix_is_counted_per_task_and_taken_off(make_config: MakeConfig,
                                                            tmp_path: Path) -> None:
    HITS.clear()
    tasks_dir = tmp_path / "tasks"
    (tasks_dir / "gsm8k").mkdir(parents=True)
    up = FakeUpstream(reply=lambda body, n: "" if "empty" in str(body) else f"answer {n}")
    seen: list[Any] = []
    async with running_upstreams(up) as urls, \
            running_proxy(make_config(urls, tasks_dir=tasks_dir)) as (_, base):
        for _round in range(2):  # the second round: from the cache if cacheable, counted
            for q in ("q1", "q2", "empty"):
                status, answer = await _post(base, "/task/gsm8k/v1/chat/completions",
                                             chat(q, temperature=0))
                assert status == 200
                seen.append(answer)
        assert (await _post(base, "/v1/chat/completions", chat("untagged")))[0] == 200
        assert (await _post(base, "/task/other/v1/chat/completions", chat("x")))[0] == 200
        # not a task key: no route (404), and nothing is written for it
        assert (await _post(base, "/task/.hidden/v1/chat/completions", chat("y")))[0] == 404
        assert (await _post(base, "/task/gsm8k/metrics", {}))[0] == 404
    # the upstream saw the usual path only
    assert {p for p in up.paths if p != "/health"} == {"/v1/chat/completions"}
    stats = read_runtime(str(tasks_dir / "gsm8k"))
    assert stats is not None
    reasons: dict[str, int] = {}
    for a in seen:
        for c in a["choices"]:
            reasons[c["finish_reason"]] = reasons.get(c["finish_reason"], 0) + 1
    assert (stats["requests"], stats["cached"], stats["errors"]) == (6, HITS[:6].count("hit"), 0)
    assert HITS[:6].count("hit") == 3
    assert stats["finish_reasons"] == reasons and stats["choices"] == 6
    assert stats["latency_ms"] is not None and stats["streamed"] == 0
    # "other" has no task directory here: served, never written; nothing for ".hidden"
    assert sorted(p.name for p in tasks_dir.iterdir()) == ["gsm8k"]
    assert json.loads((tasks_dir / "gsm8k" / "runtime.json").read_text())["schema"] == 1


def test_runtime_counts_reasoning_only_answers_and_their_flag() -> None:
    from hpceval.results.flags import runtime_flags
    from hpceval.results.runtime import TaskStats

    stats = TaskStats()
    answer = {"choices": [{"finish_reason": "length",
                           "message": {"content": " ", "reasoning": "let me think"}}],
              "usage": {"prompt_tokens": 7, "completion_tokens": 5}}
    for _ in range(3):
        stats.record(200, 0.1, False, answer)
    stats.record(200, 0.2, False, {"choices": [{"finish_reason": "stop",
                                                "message": {"content": "4"}}]})
    stats.record(500, 0.3, False, None)
    data = stats.to_json()
    assert (data["requests"], data["errors"], data["choices"]) == (5, 1, 4)
    assert data["finish_reasons"] == {"length": 3, "stop": 1}
    assert data["empty_with_reasoning"] == 3 and data["completion_tokens"] == 15
    assert [f.code for f in runtime_flags(data)] == ["length", "reasoning-only"]
    assert runtime_flags(None) == [] and runtime_flags({"choices": 0}) == []


def test_a_scoring_request_is_no_generation_and_raises_no_length_flag() -> None:
    """lm-eval's log-likelihood requests (echo: true, max_tokens 1) end with finish_reason
    "length" by design: they score the prompt, nothing was cut. The README demo's HellaSwag
    flagged 40 of 40 of them as cut generations."""
    from hpceval.results.flags import runtime_flags
    from hpceval.results.runtime import TaskStats

    stats = TaskStats()
    scored = {"choices": [{"finish_reason": "length", "text": " end", "logprobs": {}}],
              "usage": {"prompt_tokens": 30, "completion_tokens": 1}}
    for _ in range(40):
        stats.record(200, 0.1, False, scored, scoring=True)
    stats.record(200, 0.1, False, {"choices": [{"finish_reason": "stop", "text": "4"}]})
    data = stats.to_json()
    assert (data["requests"], data["choices"], data["scored"]) == (41, 1, 40)
    assert data["finish_reasons"] == {"stop": 1} and data["prompt_tokens"] == 1200
    assert runtime_flags(data) == []
