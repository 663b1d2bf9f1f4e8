"""The judged lm-eval task hpceval ships (lm-eval-upstream.judged_qa): its data, and how its
hooks ask the judge, score the verdict, and fail when the judge cannot be asked.

The judge here is a small HTTP server in the test that records what it was sent; the real
thing (two vLLM servers, real lm-eval) is tests/integration/test_judged_task_vllm.py."""

from __future__ import annotations

import importlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import ModuleType
from typing import Any

import pytest
from support.lm_eval_env import require_lm_eval

utils: ModuleType = importlib.import_module("hpceval.tasks.lm_eval_tasks.judged_qa.utils")


class Judge:
    """Answers each POST with the next scripted (status, reply text); records the bodies."""

    def __init__(self, script: list[tuple[int, str]]) -> None:
        self.script = list(script)
        self.bodies: list[dict[str, Any]] = []
        judge = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers["Content-Length"])
                judge.bodies.append({"path": self.path, "auth": self.headers.get("Authorization"),
                                     **json.loads(self.rfile.read(length))})
                status, text = judge.script.pop(0) if judge.script else (200, "yes")
                body = json.dumps({"choices": [{"message": {"content": text}}]}).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture()
def judge(monkeypatch: pytest.MonkeyPatch) -> Iterator[Judge]:
    server = Judge([])
    monkeypatch.setenv("JUDGE_CHAT_URL", server.url)
    monkeypatch.setenv("JUDGE_MODEL_ID", "the judge")
    monkeypatch.delenv("JUDGE_API_KEY", raising=False)
    monkeypatch.setattr(utils, "BACKOFF_S", 0.0)
    yield server
    server.server.shutdown()


DOC = {"question": "What is the capital of France?", "reference": "Paris"}


def test_data_ships_with_the_package_and_loads_offline() -> None:
    rows = [json.loads(line) for line in utils.DATA_FILE.read_text().splitlines()]
    assert len(rows) == 20 and len({r["question"] for r in rows}) == 20
    assert all(set(r) == {"id", "question", "reference"} and r["reference"] for r in rows)
    require_lm_eval()  # loading goes through `datasets`, which comes with lm-eval
    docs = utils.load_docs(version=1.0)["test"]
    assert docs.num_rows == 20 and docs[0]["question"] == rows[0]["question"]


@pytest.mark.parametrize(("text", "expected"), [
    ("yes", True), ("Yes.", True), (" YES, it matches", True), ("No", False), ("no.", False),
    ("The answer is no", None), ("yesterday", None), ("", None), ("noted", None)])
def test_the_verdict_is_the_first_word(text: str, expected: bool | None) -> None:
    assert utils.verdict(text) is expected


def test_each_sample_asks_the_judge_once_and_scores_its_verdict(judge: Judge) -> None:
    judge.script = [(200, "Yes."), (200, "no"), (200, "I think so")]
    scores = [utils.process_results(DOC, [answer]) for answer in ("Paris.", "Lyon", "Paris")]
    assert scores == [{"judge_acc": 1.0, "judge_unparsed": 0.0},
                      {"judge_acc": 0.0, "judge_unparsed": 0.0},
                      {"judge_acc": 0.0, "judge_unparsed": 1.0}]
    first = judge.bodies[0]
    assert len(judge.bodies) == 3 and first["path"] == "/v1/chat/completions"
    assert first["model"] == "the judge" and first["temperature"] == 0 and first["auth"] is None
    prompt = first["messages"][-1]["content"]
    assert "What is the capital of France?" in prompt and "Reference answer: Paris" in prompt
    assert "Candidate answer: Paris." in prompt


def test_the_api_key_is_sent_when_given(judge: Judge, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUDGE_API_KEY", "s3cret")
    utils.process_results(DOC, ["Paris"])
    assert judge.bodies[0]["auth"] == "Bearer s3cret"


def test_no_judge_configured_is_an_error_naming_what_is_missing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JUDGE_CHAT_URL", raising=False)
    monkeypatch.setenv("JUDGE_MODEL_ID", "j")
    with pytest.raises(utils.JudgeError, match="JUDGE_CHAT_URL not set"):
        utils.process_results(DOC, ["Paris"])


def test_a_refusing_judge_fails_at_once(judge: Judge) -> None:
    judge.script = [(400, "bad request")]
    with pytest.raises(utils.JudgeError, match="HTTP 400"):
        utils.process_results(DOC, ["Paris"])
    assert len(judge.bodies) == 1


def test_a_failing_judge_is_retried_then_fails(judge: Judge) -> None:
    judge.script = [(503, "busy"), (200, "yes")]
    assert utils.process_results(DOC, ["Paris"])["judge_acc"] == 1.0
    judge.script = [(503, "busy")] * utils.ATTEMPTS
    with pytest.raises(utils.JudgeError, match=f"after {utils.ATTEMPTS} attempts"):
        utils.process_results(DOC, ["Paris"])
    assert len(judge.bodies) == 2 + utils.ATTEMPTS


def test_an_unreachable_judge_fails_within_the_timeout(
        judge: Judge, monkeypatch: pytest.MonkeyPatch) -> None:
    judge.server.shutdown()
    judge.server.server_close()
    monkeypatch.setenv("JUDGE_TIMEOUT", "2")
    with pytest.raises(utils.JudgeError, match="did not answer"):
        utils.process_results(DOC, ["Paris"])
