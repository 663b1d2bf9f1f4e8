"""lm-evaluation-harness: ``<output_path>/<model>/results_<timestamp>.json``.

Metric keys look like ``"exact_match,strict-match"`` with the stderr beside them as
``"exact_match_stderr,strict-match"`` (sometimes the string "N/A").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hpceval.tasks.adapters import NoResultsFound, read_results_text
from hpceval.tasks.result import Metric, TaskResult

# Numbers lm-eval keeps beside the metrics that are not scores: "sample_len" is the item count
# (already in n-samples), and would otherwise read as a metric named sample_len = 100.
BOOKKEEPING = frozenset({"sample_len"})


def newest_results_file(output_dir: Path) -> Path:
    found = sorted(output_dir.rglob("results_*.json"), key=lambda p: (p.stat().st_mtime, p.name))
    if not found:
        raise NoResultsFound(f"no lm-eval results_*.json under {output_dir}")
    return found[-1]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def parse_results(data: dict[str, Any], task: str, source: str | None = None) -> TaskResult:
    metrics: list[Metric] = []
    samples = data.get("n-samples") or {}
    for subtask, values in sorted((data.get("results") or {}).items()):
        n = (samples.get(subtask) or {}).get("effective")
        for key, raw in sorted(values.items()):
            metric, _, filt = key.partition(",")
            value = _number(raw)
            if value is None or metric.endswith("_stderr") or metric in BOOKKEEPING:
                continue
            stderr = _number(values.get(f"{metric}_stderr,{filt}" if filt else f"{metric}_stderr"))
            # lm-eval's "none" filter is no filter: None, as eval-factory reports the same metric
            metrics.append(Metric(task=subtask, name=metric, value=value, stderr=stderr,
                                  filter=None if filt in ("", "none") else filt,
                                  n_samples=n if isinstance(n, int) else None))
    version = data.get("lm_eval_version") or (data.get("config") or {}).get("lm_eval_version")
    return TaskResult(task=task, harness="lm-evaluation-harness",
                      harness_version=str(version) if version else None, metrics=metrics,
                      source_file=source,
                      # n-samples: each subtask's own size ("original") and what was taken
                      # ("effective"): the count flag tells a short run from a small subtask
                      extra={"n-shot": data.get("n-shot") or {},
                             "n-samples": samples if isinstance(samples, dict) else {},
                             "versions": data.get("versions") or {}})


def parse(output_dir: Path, task: str) -> TaskResult:
    path = newest_results_file(output_dir)
    data = json.loads(read_results_text(path))
    return parse_results(data, task, str(path.relative_to(output_dir)))
