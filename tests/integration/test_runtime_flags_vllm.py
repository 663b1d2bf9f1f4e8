"""The in-job proxy's runtime statistics and the flags they raise, on the real SmolLM2 server.

The real proxy (in process) in front of the session's shared `vllm serve`
(vllm_support.smollm2_server), requests sent the way the job script sends a task's: under
``/task/<key>/``. Three tasks:

* ``cut``: chat answers limited to 2 tokens: vLLM ends every one with finish_reason "length",
  and the task is flagged ``length``;
* ``think``: vLLM's structured outputs force each answer to open a ``<think>`` trace that the
  token limit cuts; the proxy's strip_reasoning interceptor moves the unfinished trace out of
  ``content`` (nothing is left to score), so the task is flagged ``reasoning-only``;
* ``plain``: ordinary answers; flagged only if vLLM really cut them (what the client saw).

Each runtime.json must equal what the client received (finish reasons, usage tokens), and
the requests must equal the chat requests vLLM's own access log gained (without the prefix).
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from hpceval.interceptors.strip_reasoning import StripReasoning
from hpceval.job.proxy.config import ProxyConfig
from hpceval.job.proxy.server import ProxyServer
from hpceval.results.flags import LENGTH_SHARE, runtime_flags
from hpceval.results.runtime import read_runtime
from tests.integration.vllm_support import SHARED_NAME, Served

pytestmark = pytest.mark.slow

CHAT_LINE = re.compile(r'"POST /v1/chat/completions HTTP')
PROMPTS = ("Name a colour.", "What is 2 + 2?", "Say hello.")


def _body(prompt: str, max_tokens: int, **extra: Any) -> dict[str, Any]:
    return {"model": SHARED_NAME, "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens, "temperature": 0, **extra}


async def _run(base: str, tasks_dir: Path) -> dict[str, list[dict[str, Any]]]:
    config = ProxyConfig(upstreams=(base,), cache_dir=tasks_dir.parent / "cache",
                         progress_file=tasks_dir.parent / "progress.json", tasks_dir=tasks_dir,
                         interceptors=(StripReasoning(strip_reasoning=True),),
                         progress_interval=0.2, request_timeout=120.0, shutdown_grace=1.0)
    server = ProxyServer(config)
    port = await server.start()
    seen: dict[str, list[dict[str, Any]]] = {"cut": [], "think": [], "plain": []}
    think = {"structured_outputs": {"regex": "<think>[a-z]+( [a-z]+)*"}}
    try:
        for _ in range(100):  # the prober marks the instance up first
            if server.balancer.any_up():
                break
            await asyncio.sleep(0.1)
        async with aiohttp.ClientSession() as client:
            for key, max_tokens, extra in (("cut", 2, {}), ("think", 16, think),
                                           ("plain", 48, {})):
                for prompt in PROMPTS:
                    url = f"http://127.0.0.1:{port}/task/{key}/v1/chat/completions"
                    async with client.post(url, json=_body(prompt, max_tokens, **extra)) as r:
                        answer = await r.json()
                        assert r.status == 200, answer
                        seen[key].append(answer)
    finally:
        await server.stop()
    return seen


def test_runtime_stats_and_flags_from_the_real_server(smollm2_server: Served,
                                                      user_tmp: Path) -> None:
    tasks_dir = user_tmp / "tasks"
    for key in ("cut", "think", "plain"):
        (tasks_dir / key).mkdir(parents=True)
    start = smollm2_server.log_size()
    seen = asyncio.run(asyncio.wait_for(_run(smollm2_server.base, tasks_dir), 300))

    # vLLM saw every request at its own path: the /task/<key> prefix never reached it
    assert smollm2_server.requests_since(start, CHAT_LINE) == sum(map(len, seen.values()))
    stats = {key: read_runtime(str(tasks_dir / key)) for key in seen}
    for key, answers in seen.items():
        got = stats[key]
        assert got is not None, key
        reasons: dict[str, int] = {}
        for a in answers:
            for choice in a["choices"]:
                reasons[choice["finish_reason"]] = reasons.get(choice["finish_reason"], 0) + 1
        assert got["requests"] == len(answers) and got["errors"] == 0 and got["cached"] == 0
        assert got["finish_reasons"] == reasons, (key, got)
        assert got["completion_tokens"] == sum(a["usage"]["completion_tokens"] for a in answers)
        assert got["prompt_tokens"] == sum(a["usage"]["prompt_tokens"] for a in answers)
        assert got["latency_ms"]["p50"] <= got["latency_ms"]["p99"]

    codes = {key: [f.code for f in runtime_flags(stats[key])] for key in seen}
    # 2 tokens: every generation cut
    assert stats["cut"]["finish_reasons"] == {"length": len(PROMPTS)}
    assert codes["cut"] == ["length"]
    # the forced, cut trace: content empty after strip_reasoning, the trace kept beside it
    for a in seen["think"]:
        message = a["choices"][0]["message"]
        assert message["content"] == "" and message["reasoning_content"], message
    assert stats["think"]["empty_with_reasoning"] == len(PROMPTS)
    assert "reasoning-only" in codes["think"]
    # ordinary answers: flagged exactly when vLLM cut more than the share
    cut_plain = sum(c["finish_reason"] == "length" for a in seen["plain"] for c in a["choices"])
    assert ("length" in codes["plain"]) == (cut_plain > LENGTH_SHARE * len(PROMPTS))
    assert "reasoning-only" not in codes["plain"]
    assert json.loads((tasks_dir / "cut" / "runtime.json").read_text())["schema"] == 1
