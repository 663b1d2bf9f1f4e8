"""Scores that are wrong without an error: the checks that make a task loud.

From the harness's per-sample files and the run's config (runtime flags from the proxy's
records, such as generations cut at the token limit, are added by ``job.runtime_stats``):

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

from hpceval.results.paired import ItemScores


@dataclass(frozen=True)
class Flag:
    code: str
    message: str

    def text(self) -> str:
        return f"{self.code}: {self.message}"


def asked_samples(task_dir: str, task: str) -> int | None:
    """limit_samples from the model's resolved config (the task's own, else the run's)."""
    model_dir = os.path.dirname(os.path.dirname(os.path.abspath(task_dir)))
    return _asked(os.path.join(model_dir, "run.yaml"), task)


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
    return score_flags(items, asked=asked_samples(task_dir, task), reported_n=n)
