"""Scores that are wrong without an error: the checks that make a task loud.

From what the in-job proxy counted for the task (its runtime.json, ``results.runtime``):

* ``length``: more than LENGTH_SHARE of the generations ended with ``finish_reason: length``
  (cut at max_tokens: the answer is often missing);
* ``reasoning-only``: more than REASONING_SHARE of the chat answers the harness got had an empty
  ``content`` while ``reasoning_content`` (vLLM: ``reasoning``) held text: the harness scored
  nothing where the model answered in its trace (reasoning handling missing, or the trace cut
  before its end marker);

from the harness's per-sample files and the run's config:

* ``all-zero``: every sample scored 0 (a scorer that fell back to exact match, a broken
  prompt format); a task with one item is not flagged;
* ``all-unparsable``: every answer came out of the harness's filter as ``[invalid]`` or empty;
* ``count``: the number of scored samples differs from the number asked (``limit_samples``
  in the run's resolved config, else the n the harness reported).

A flag is a short code plus a sentence; ``status``, the results table, the report, ``compare``
and ``gate`` (a NO-GO) show the same objects.
"""

from __future__ import annotations

import functools
import os
from collections import Counter
from dataclasses import dataclass
from typing import Any

from hpceval.contract import CONFIG_FILE
from hpceval.results.paired import ItemScores
from hpceval.results.runtime import read_runtime

LENGTH_SHARE = 0.1  # generations cut at the token limit: beyond this share, the task is flagged
REASONING_SHARE = 0.05  # answers only in the reasoning trace: beyond this share, flagged


@dataclass(frozen=True)
class Flag:
    code: str
    message: str

    def text(self) -> str:
        return f"{self.code}: {self.message}"


def runtime_flags(stats: dict[str, Any] | None) -> list[Flag]:
    """The flags a task's runtime.json raises (none without one)."""
    out: list[Flag] = []
    choices = stats.get("choices") if stats else None
    if not isinstance(choices, int) or choices <= 0 or stats is None:
        return out
    cut = (stats.get("finish_reasons") or {}).get("length", 0)
    if isinstance(cut, int) and cut > LENGTH_SHARE * choices:
        out.append(Flag("length", f"{cut} of {choices} generations ended with finish_reason "
                                  f"'length' (cut at max_tokens; over {LENGTH_SHARE:.0%})"))
    empty = stats.get("empty_with_reasoning", 0)
    if isinstance(empty, int) and empty > REASONING_SHARE * choices:
        out.append(Flag("reasoning-only",
                        f"{empty} of {choices} answers had an empty content while "
                        "reasoning_content held text (what the harness scored was empty; "
                        "configure reasoning handling or raise max_tokens)"))
    return out


def asked_samples(task_dir: str, task: str) -> int | None:
    """limit_samples from the model's resolved config (the task's own, else the run's)."""
    model_dir = os.path.dirname(os.path.dirname(os.path.abspath(task_dir)))
    return _asked(os.path.join(model_dir, CONFIG_FILE), task)


@functools.lru_cache(maxsize=1024)
def _asked(config_path: str, task: str) -> int | None:
    import yaml

    try:
        with open(config_path, encoding="utf-8") as handle:
            config = yaml.safe_load(handle) or {}
    except (OSError, yaml.YAMLError):
        return None
    evaluation = config.get("evaluation") if isinstance(config, dict) else None
    if not isinstance(evaluation, dict):
        return None
    limit = (evaluation.get("params") or {}).get("limit_samples")
    short = task.rsplit(".", 1)[-1]
    for entry in evaluation.get("tasks") or []:
        if isinstance(entry, dict) and entry.get("name") in (task, short):
            limit = (entry.get("params") or {}).get("limit_samples", limit)
    return limit if isinstance(limit, int) and not isinstance(limit, bool) else None


def score_flags(items: ItemScores, *, asked: int | None, reported_n: int | None) -> list[Flag]:
    """The flags one task's per-sample scores raise (none without sample files)."""
    out: list[Flag] = []
    n = len(items.scores)
    if items.files == 0:
        return out
    if n > 1 and all(v == 0 for v in items.scores.values()):
        out.append(Flag("all-zero", f"every one of the {n} samples scored 0"))
    if n > 0 and items.unparsable == n:
        out.append(Flag("all-unparsable",
                        f"every one of the {n} answers was unparsable ([invalid] or empty)"))
    if asked is not None:  # lm-eval applies limit_samples to each subtask
        counts = Counter(items.clusters)
        short = {k: v for k, v in sorted(counts.items()) if v != asked}
        if short:
            where = ", ".join(f"{k}: {v}" for k, v in list(short.items())[:5])
            out.append(Flag("count", f"{asked} samples asked (limit_samples) per subtask, "
                                     f"scored {where}"))
    elif reported_n is not None and n != reported_n:
        out.append(Flag("count", f"{n} samples in the sample files, the harness reported "
                                 f"{reported_n}"))
    return out


def task_flags(task_dir: str, task: str, metric: str, filter: str | None,
               reported_n: Any = None, items: ItemScores | None = None) -> list[Flag]:
    from hpceval.results.paired import read_item_scores

    if items is None:
        items = read_item_scores(task_dir, metric, filter)
    n = int(reported_n) if isinstance(reported_n, (int, float)) and reported_n == reported_n \
        else None
    return runtime_flags(read_runtime(task_dir)) + score_flags(
        items, asked=asked_samples(task_dir, task), reported_n=n)


def finished_task_flags(task_dir: str) -> list[Flag]:
    """The flags of a finished task, from its directory alone (status, the results table)."""
    from hpceval.results.table import primary_metric

    found = primary_metric(task_dir)
    if found is None:
        return []
    task, metric = found
    filter = metric.get("filter") if isinstance(metric.get("filter"), str) else None
    return task_flags(task_dir, task, str(metric.get("name")), filter or None,
                      metric.get("n_samples"))


def with_flags(frame: Any, *, texts: bool) -> Any:
    """The results frame plus a ``flags`` column (one task's flags on each of its rows):
    "code: message" texts in a list with `texts` (JSON), else the codes joined by ", "."""
    out = frame.copy()
    cache: dict[str, list[Flag]] = {}
    column = []
    for task_dir in out["task_dir"].tolist() if "task_dir" in out.columns else []:
        if task_dir not in cache:
            cache[task_dir] = finished_task_flags(str(task_dir))
        found = cache[task_dir]
        column.append([f.text() for f in found] if texts else ", ".join(f.code for f in found))
    out["flags"] = column if column or out.empty else ""
    return out

