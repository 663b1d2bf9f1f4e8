"""Per-task runtime statistics on real sockets: /task/<key>/ routing and runtime.json."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from proxy_fakes import FakeUpstream, chat, running_proxy, running_upstreams

from hpceval.job.proxy.config import ProxyConfig
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


async def test_an_infrastructure_failure_is_on_disk_before_its_answer_arrives(
        make_config: MakeConfig, tmp_path: Path) -> None:
    """collect runs once the harness has exited and reads runtime.json: every failure the
    harness was sent must be counted there by then, not at the next periodic write."""
    tasks_dir = tmp_path / "tasks"
    (tasks_dir / "gsm8k").mkdir(parents=True)
    up = FakeUpstream(fail=10, fail_status=500)  # more than the retries: the last 500 goes back
    async with running_upstreams(up) as urls, \
            running_proxy(make_config(urls, tasks_dir=tasks_dir, max_retries=1,
                                      progress_interval=3600.0)) as (_, base):
        status, _answer = await _post(base, "/task/gsm8k/v1/chat/completions", chat("q1"))
        assert status == 500
        on_disk = read_runtime(str(tasks_dir / "gsm8k"))  # no periodic write within the hour
        assert on_disk is not None
        assert (on_disk["infra_errors"], on_disk["infra_causes"]) == (1, {"500 server error": 1})
        up.fail = 0
        assert (await _post(base, "/task/gsm8k/v1/chat/completions", chat("q2")))[0] == 200
        # the model's own refusals (4xx) are answers, not infrastructure failures
        up.fail, up.fail_status = 1, 400
        assert (await _post(base, "/task/gsm8k/v1/chat/completions", chat("q3")))[0] == 400
    stats = read_runtime(str(tasks_dir / "gsm8k"))
    assert stats is not None
    assert (stats["requests"], stats["errors"], stats["infra_errors"]) == (3, 2, 1)


async def test_writes_of_runtime_json_never_go_back_to_an_older_snapshot(
        tmp_path: Path) -> None:
    from hpceval.job.proxy.stats import TaskRecorder

    (tmp_path / "t").mkdir()
    recorder = TaskRecorder(tmp_path)
    written: list[int] = []
    real_write = recorder.write

    def slow_write(documents: list[tuple[Path, dict[str, object]]],
                   durable: bool = False) -> None:
        time.sleep(0.05)  # a slow shared file system: the next flush comes meanwhile
        real_write(documents, durable)
        written.append(int(str(documents[0][1]["requests"])))

    recorder.write = slow_write  # type: ignore[method-assign]
    flushes = []
    for _n in range(1, 6):
        recorder.record("t", 502, 0.1, False, None, infra="502 connection failed or lost")
        flushes.append(asyncio.ensure_future(recorder.flush()))
        await asyncio.sleep(0.01)
    await asyncio.gather(*flushes)
    assert written == sorted(written) and written[-1] == 5
    assert len(written) < 5  # the flushes that waited shared a write
    stats = read_runtime(str(tmp_path / "t"))
    assert stats is not None and stats["infra_errors"] == 5


def test_infra_errors_raise_their_flag_with_causes_and_client_closes_do_not() -> None:
    from hpceval.results.flags import runtime_flags
    from hpceval.results.runtime import CLIENT_CLOSED, TaskStats

    stats = TaskStats()
    stats.record(200, 0.1, False, {"choices": [{"finish_reason": "stop",
                                                "message": {"content": "4"}}]})
    stats.record(CLIENT_CLOSED, 3.0, False, None)
    assert runtime_flags(stats.to_json()) == []
    stats.record(504, 30.0, False, None, infra="504 timed out")
    stats.record(504, 30.0, False, None, infra="504 timed out")
    stats.record(500, 0.1, False, None, infra="500 server error")
    data = stats.to_json()
    assert (data["errors"], data["infra_errors"], data["client_closed"]) == (4, 3, 1)
    (flag,) = runtime_flags(data)
    assert flag.code == "infra-errors"
    assert flag.message.startswith("3 of 5 requests failed after the proxy's retries")
    assert "504 timed out: 2" in flag.message and "500 server error: 1" in flag.message
