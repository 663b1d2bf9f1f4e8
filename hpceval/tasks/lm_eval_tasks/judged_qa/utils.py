"""judged_qa: lm-eval hooks for short quiz answers graded by a judge model.

lm-eval loads this file by path (``!function utils.<name>`` in judged_qa.yaml), in whatever
Python runs ``lm_eval``; it needs only the standard library and ``datasets`` (lm-eval's own
dependency). The judge is any OpenAI-compatible chat endpoint, named by the environment, as NeMo
Evaluator names an auxiliary deployment's endpoint to the tasks:

* ``JUDGE_CHAT_URL``: its chat completions URL (``.../v1/chat/completions``; a URL ending in
  ``/v1`` gets ``/chat/completions`` added);
* ``JUDGE_MODEL_ID``: the model name to send;
* ``JUDGE_API_KEY`` (optional): sent as ``Authorization: Bearer ...``;
* ``JUDGE_TIMEOUT`` (optional): seconds per request, default 60.

A judge that cannot be asked (no URL, no answer after the retries, an error status) fails the
task: a silent 0 would look like a bad model. A judge that answers neither yes nor no scores 0
and is counted in ``judge_unparsed``, so a weak judge shows as one.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

DATA_FILE = Path(__file__).resolve().parent / "judged_qa.jsonl"
ATTEMPTS = 3  # per sample: a refused connection, a timeout or a 5xx is retried; a 4xx is not
BACKOFF_S = 2.0  # wait before retry n (1, 2): n * BACKOFF_S
MAX_ANSWER_BYTES = 1 << 20  # a judge's reply is a few words; anything bigger is not read whole
SYSTEM = "You grade answers to quiz questions. Reply with one word: yes or no."
PROMPT = ("Question: {question}\nReference answer: {reference}\nCandidate answer: {answer}\n\n"
          "Does the candidate answer give the same answer as the reference answer? "
          "Reply yes or no.")
_VERDICT = re.compile(r"\W*(yes|no)\b", re.IGNORECASE)


class JudgeError(RuntimeError):
    """The judge could not be asked or did not answer: the task fails rather than score 0."""


def load_docs(**_: Any) -> Any:
    """The shipped questions (lm-eval's ``custom_dataset``): a path relative to this file, so
    the task works wherever hpceval is installed, without a hub or a placeholder."""
    import datasets  # type: ignore[import-untyped]  # lm-eval's; imported here: loads without

    return datasets.DatasetDict({"test": datasets.Dataset.from_json(str(DATA_FILE))})


def judge_endpoint() -> tuple[str, str]:
    """(chat completions URL, model id) from the environment, or JudgeError naming what is
    missing."""
    url = os.environ.get("JUDGE_CHAT_URL", "").strip()
    model = os.environ.get("JUDGE_MODEL_ID", "").strip()
    missing = [name for name, value in (("JUDGE_CHAT_URL", url), ("JUDGE_MODEL_ID", model))
               if not value]
    if missing:
        raise JudgeError(f"judged_qa needs a judge: {' and '.join(missing)} not set (in hpceval: "
                         "an auxiliary deployment, e.g. params.extra.judge.url: "
                         "auxiliary_deployments.judge.chat_url)")
    if url.rstrip("/").endswith("/v1"):
        url = url.rstrip("/") + "/chat/completions"
    return url, model


def verdict(text: str) -> bool | None:
    """True for yes, False for no (the first word, case and punctuation aside), else None."""
    match = _VERDICT.match(text)
    return None if match is None else match.group(1).lower() == "yes"


def ask_judge(question: str, reference: str, answer: str) -> str:
    """The judge's reply to one grading prompt (greedy, a few tokens)."""
    url, model = judge_endpoint()
    body = json.dumps({
        "model": model, "temperature": 0, "max_tokens": 4,
        "messages": [{"role": "system", "content": SYSTEM},
                     {"role": "user", "content": PROMPT.format(
                         question=question, reference=reference, answer=answer.strip())}],
    }).encode()
    headers = {"Content-Type": "application/json"}
    key = os.environ.get("JUDGE_API_KEY")
    if key:
        headers["Authorization"] = f"Bearer {key}"
    timeout = float(os.environ.get("JUDGE_TIMEOUT") or 60)
    last: Exception | None = None
    for attempt in range(ATTEMPTS):
        if attempt:
            time.sleep(BACKOFF_S * attempt)
        try:
            request = urllib.request.Request(url, data=body, headers=headers, method="POST")
            with urllib.request.urlopen(request, timeout=timeout) as response:
                reply = json.loads(response.read(MAX_ANSWER_BYTES))
            return str(reply["choices"][0]["message"]["content"] or "")
        except urllib.error.HTTPError as exc:
            if exc.code < 500:  # the request itself is wrong: asking again changes nothing
                detail = exc.read(2000).decode(errors="replace")
                raise JudgeError(f"judge {url} answered HTTP {exc.code}: {detail}") from exc
            last = exc
        except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
            last = exc
    raise JudgeError(f"judge {url} did not answer after {ATTEMPTS} attempts: {last!r}")


def process_results(doc: dict[str, Any], results: list[str]) -> dict[str, float]:
    """lm-eval's per-sample hook: the judge decides whether the model's answer matches."""
    decided = verdict(ask_judge(doc["question"], doc["reference"], results[0]))
    return {"judge_acc": float(decided is True), "judge_unparsed": float(decided is None)}
