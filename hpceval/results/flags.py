"""Scores that are wrong without an error: the checks that make a task loud.

From what the in-job proxy counted for the task (its runtime.json, ``results.runtime``):

* ``length``: more than LENGTH_SHARE of the generations ended with ``finish_reason: length``
  (cut at max_tokens: the answer is often missing);
* ``reasoning-only``: more than REASONING_SHARE of the chat answers the harness got had an empty
  ``content`` while ``reasoning_content`` (vLLM: ``reasoning``) held text: the harness scored
  nothing where the model answered in its trace (reasoning handling missing, or the trace cut
  before its end marker);

* ``infra-errors``: requests of the task still failed after the proxy's retries (5xx, 429, no
  connection, timeout) and the harness scored them, most likely as wrong answers. A task with
  more than ``evaluation.infra_errors_allowed`` (default 0) is not scored at all (it failed);
  this flag marks one that was allowed them;

from the harness's per-sample files and the run's config:

* ``all-zero``: every sample scored 0 (a scorer that fell back to exact match, a broken
  prompt format); a task with one item is not flagged;
* ``all-unparsable``: every answer came out of the harness's filter as ``[invalid]`` or empty;
* ``count``: fewer items were scored in a subtask than it has *and* than were asked
  (``limit_samples`` in the run's resolved config; lm-eval applies it per subtask): scored <
  min(size, limit). The size is lm-eval's ``n-samples`` ``original`` (results.json's extra,
  else the harness's own results_*.json). Without a limit, what was asked is the harness's
  ``effective`` count, else (no n-samples either) the n it reported for the primary metric;
  more items than asked is no shortfall;
* ``count-unverified``: fewer items scored than asked in a subtask whose own size is unknown
  (no n-samples, or none under the sample files' subtask names: eval-factory's results.yml
  gives the n it scored, not the task's size). A
  subtask of 198 items with a limit of 200 looks the same as 2 lost items, so this is not
  ``count``: its reason says the size is unknown, and the gate only warns by default.

A flag is a short code plus a sentence; ``status``, the results table, the report, ``compare``
and ``gate`` (which acts on the candidate's flags as its policy says: results.gate) show the same
objects.
"""

from __future__ import annotations

import functools
import json
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpceval.contract import CONFIG_FILE, HARNESS_OUT_DIR, RESULTS_FILE
from hpceval.results.columns import with_column
from hpceval.results.paired import ItemScores
from hpceval.results.runtime import read_runtime
from hpceval.results.runtime_text import infra_errors

# Every code a flag can have: the gate's policy names them (results.gate).
FLAG_CODES = ("length", "reasoning-only", "infra-errors", "all-zero", "all-unparsable",
              "count", "count-unverified")
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
    lost, causes = infra_errors(stats)
    if lost:
        out.append(Flag("infra-errors", f"{lost} of {stats.get('requests') if stats else '?'} "
                                        f"requests failed after the proxy's retries ({causes});"
                                        " the harness scored them, most likely as wrong answers"))
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


Sizes = dict[str, tuple[int, int]]  # subtask -> (items it has, items the harness took)


def _n_samples(data: Any) -> Sizes:
    """lm-eval's ``n-samples`` ({subtask: {original, effective}}) of a parsed JSON object."""
    found = data.get("n-samples") if isinstance(data, dict) else None
    out: Sizes = {}
    for subtask, entry in (found.items() if isinstance(found, dict) else ()):
        size = entry.get("original") if isinstance(entry, dict) else None
        if isinstance(size, int) and not isinstance(size, bool):
            took = entry.get("effective")
            out[str(subtask)] = (size, took if isinstance(took, int)
                                 and not isinstance(took, bool) else size)
    return out


def _json(path: str) -> Any:
    try:
        with open(path, "rb") as handle:
            return json.loads(handle.read())
    except (OSError, ValueError):
        return None


def task_sizes(task_dir: str) -> Sizes:
    """Each subtask's own size as the harness reported it: results.json's extra (lm-eval's
    adapter keeps n-samples there), else the harness's own newest results_*.json (tasks
    finished before it did, and harnesses that leave lm-eval's file beside their own). Empty
    when unknown."""
    from hpceval.tasks.adapters import NoResultsFound
    from hpceval.tasks.adapters.lm_eval import newest_results_file

    result = _json(f"{task_dir}/{RESULTS_FILE}")
    found = _n_samples(result.get("extra") if isinstance(result, dict) else None)
    if found:
        return found
    try:
        path = newest_results_file(Path(task_dir) / HARNESS_OUT_DIR)
    except (NoResultsFound, OSError):
        return {}
    return _n_samples(_json(str(path)))


def _listed(parts: list[str]) -> str:
    # the first five; a task of 57 subtasks must not print 57 of them in one line
    return ", ".join(parts[:5]) + (f", and {len(parts) - 5} more" if len(parts) > 5 else "")


def count_flags(items: ItemScores, *, asked: int | None, reported_n: int | None,
                sizes: Callable[[], Sizes]) -> list[Flag]:
    """``count`` / ``count-unverified`` (see the module's docstring). `sizes` is called once,
    and only for a task with sample files: the results table of tasks without them reads no
    more than before."""
    counts = Counter(items.clusters)
    known = sizes()
    if counts and not set(counts) & set(known):
        known = {}  # sizes under names no sample file has: about other subtasks, not these
    if asked is None and not known:
        n = len(items.scores)
        if reported_n is not None and n < reported_n:
            return [Flag("count", f"{n} samples in the sample files, the harness reported "
                                  f"{reported_n}")]
        return []
    short, unverified = [], []
    for subtask in sorted(set(counts) | set(known)):
        scored = counts.get(subtask, 0)
        if subtask in known:
            size, took = known[subtask]
            wanted = took if asked is None else min(size, asked)
            if scored < wanted:
                short.append(f"{subtask}: {scored} of {wanted} ({size} items)")
        elif asked is not None and scored < asked:
            unverified.append(f"{subtask}: {scored}")
    out = []
    asked_text = f"asked (limit_samples {asked}) and than " if asked is not None else ""
    if short:
        out.append(Flag("count", f"fewer items scored than {asked_text}the task has: "
                                 + _listed(short)))
    if unverified:
        out.append(Flag("count-unverified",
                        f"fewer items scored than asked (limit_samples {asked}): "
                        f"{_listed(unverified)}; the task's own size is unknown (the harness "
                        "reported no n-samples), so these may be all it has"))
    return out


def score_flags(items: ItemScores, *, asked: int | None, reported_n: int | None,
                sizes: Callable[[], Sizes] = dict) -> list[Flag]:
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
    return out + count_flags(items, asked=asked, reported_n=reported_n, sizes=sizes)


def task_flags(task_dir: str, task: str, metric: str, filter: str | None,
               reported_n: Any = None, items: ItemScores | None = None) -> list[Flag]:
    from hpceval.results.paired import read_item_scores

    if items is None:
        items = read_item_scores(task_dir, metric, filter)
    n = int(reported_n) if isinstance(reported_n, (int, float)) and reported_n == reported_n \
        else None
    return runtime_flags(read_runtime(task_dir)) + score_flags(
        items, asked=asked_samples(task_dir, task), reported_n=n,
        sizes=lambda: task_sizes(task_dir))


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
    def flags_of(folder: str, _run: str) -> list[str] | str:
        found = finished_task_flags(folder)
        return [f.text() for f in found] if texts else ", ".join(f.code for f in found)

    return with_column(frame, "flags", flags_of, empty="")
