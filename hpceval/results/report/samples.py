"""Per-sample answers for the report, read from the harness's own sample files.

lm-eval (and the eval-factory harnesses built on it) write ``samples_<task>_<date>.jsonl``
somewhere under the task's ``harness/`` directory when run with ``--log_samples``: one JSON
object per line with the prompt (``arguments``), the model's filtered answer
(``filtered_resps``), the reference (``target``) and one value per metric (named in
``metrics``). The report shows the first N samples of each task and, so that the wrong-answer
filter has something to show, the first N wrong ones too; reading stops once both are found
or after ``scan_limit`` lines, so a task with 100,000 samples costs no more than one with a few
hundred. "Wrong" means the sample's first metric is a number below 1 (exact_match, acc: 0).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

from hpceval.results.sample_files import sample_files

TEXT_LIMIT = 2000  # characters of a prompt or answer kept on the page (the file has the rest)


@dataclass(frozen=True)
class Sample:
    file: str  # relative to the task directory
    line: int  # 1-based line in that file, so a reader can find the whole record
    doc_id: Any
    prompt: str
    answer: str
    reference: str
    metric: str
    score: float | None
    filter: str | None

    @property
    def wrong(self) -> bool:
        return self.score is not None and self.score < 1


@dataclass
class TaskSamples:
    files: list[str] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    scanned: int = 0  # lines read
    wrong_scanned: int = 0  # wrong answers among them
    complete: bool = True  # every line of every file was read


def _clip(text: str) -> str:
    return text if len(text) <= TEXT_LIMIT else text[:TEXT_LIMIT] + " […]"


def _prompt(arguments: Any) -> str:
    # Written form: {"gen_args_0": {"arg_0": prompt, "arg_1": ...}, ...}; in-memory: [[prompt]]
    if isinstance(arguments, dict) and arguments:
        first = next(iter(arguments.values()))
        if isinstance(first, dict) and first:
            return str(next(iter(first.values())))
    if isinstance(arguments, list) and arguments:
        first = arguments[0]
        return str(first[0] if isinstance(first, (list, tuple)) and first else first)
    return ""


def _answer(record: dict[str, Any]) -> str:
    resps = record.get("filtered_resps")
    if isinstance(resps, list) and len(resps) == 1:
        only = resps[0]
        return str(only[0] if isinstance(only, list) and len(only) == 1 else only)
    if isinstance(resps, list) and resps:
        # Multiple choice: one log-likelihood per choice; the answer is the likeliest one.
        scores = [_loglik(r) for r in resps]
        if all(s is not None for s in scores):
            best = max(range(len(scores)), key=lambda i: scores[i] or 0.0)
            return f"choice {best}"
    return json.dumps(resps, ensure_ascii=False) if resps is not None else ""


def _loglik(resp: Any) -> float | None:
    # "(-1.25, False)" once lm-eval has turned it into text, or [-1.25, False] / ["-1.25", ...]
    if isinstance(resp, list) and resp:
        resp = resp[0]
    text = str(resp).strip("()[] ").split(",")[0].strip("'\" ")
    try:
        return float(text)
    except ValueError:
        return None


def _metric_score(record: dict[str, Any]) -> tuple[str, float | None]:
    """The sample's first metric and its value as a number (None when it is not one)."""
    metrics = record.get("metrics") or []
    metric = str(metrics[0]) if metrics else ""
    value = record.get(metric)
    score = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else (1.0 if value is True else 0.0 if value is False else None)
    return metric, score


def parse_sample(record: dict[str, Any], file: str, line: int) -> Sample:
    metric, score = _metric_score(record)
    return Sample(file=file, line=line, doc_id=record.get("doc_id"),
                  prompt=_clip(_prompt(record.get("arguments"))),
                  answer=_clip(_answer(record)), reference=_clip(str(record.get("target", ""))),
                  metric=metric, score=score, filter=record.get("filter"))


class SampleCollector:
    """Takes the first `first` samples and the first `first` wrong ones, line by line, from
    whichever reader decodes the file (read_task_samples here; results.paired's score reader
    for the report, so that a sample file is decoded once per page)."""

    def __init__(self, files: list[str], first: int, scan_limit: int) -> None:
        self.out = TaskSamples(files=files)
        self.first, self.scan_limit, self.wrong = first, scan_limit, 0
        self.done = first <= 0
        if self.done:
            self.out.complete = not files

    def feed(self, record: dict[str, Any] | None, rel: str, number: int) -> bool:
        """One line (None: not a sample record); False once nothing more is wanted."""
        out = self.out
        if self.done:
            return False
        if (out.scanned >= self.first and self.wrong >= self.first) \
                or out.scanned >= self.scan_limit:
            out.complete, self.done = False, True
            return False
        out.scanned += 1
        if record is None:
            return True
        # only the score for most lines: the prompt and answer are cut out for the rows shown
        _metric, score = _metric_score(record)
        wrong = score is not None and score < 1
        out.wrong_scanned += wrong
        if out.scanned <= self.first or (wrong and self.wrong < self.first):
            out.samples.append(parse_sample(record, rel, number))
            self.wrong += wrong
        return True


def decode_line(text: str) -> dict[str, Any] | None:
    try:
        record = json.loads(text)
    except ValueError:
        return None  # a line cut short by a killed harness: not a sample
    return record if isinstance(record, dict) else None


def read_task_samples(task_dir: str, first: int, *, scan_limit: int = 10_000) -> TaskSamples:
    """The first `first` samples and the first `first` wrong ones (each sample once)."""
    collector = SampleCollector(sample_files(task_dir), first, scan_limit)
    if collector.done:
        return collector.out
    for rel in collector.out.files:
        with open(os.path.join(task_dir, rel), encoding="utf-8", errors="replace") as handle:
            for number, text in enumerate(handle, 1):
                if not collector.feed(decode_line(text), rel, number):
                    return collector.out
    return collector.out
