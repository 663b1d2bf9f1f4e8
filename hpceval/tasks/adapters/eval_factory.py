"""NVIDIA eval-factory images (``nemo-evaluator run_eval``): ``<output_dir>/results.yml``.

nemo-evaluator dumps its ``EvaluationResult`` under ``results``, beside the command it ran, the
config (``config.type`` is the eval type, ``config.params`` the generic parameters) and the
target::

    results:
      tasks:                      # per task; lm-eval subtasks each have their own entry
        gpqa_diamond:
          metrics:
            score:                # metric name
              scores:
                micro:            # score name: one metric can carry several (micro, macro)
                  value: 0.4
                  stats: {stderr: 0.16, stddev: 0.49, count: 198}   # all optional
      groups:                     # same shape, optionally nested under `groups:`

Mapping onto ``Metric``: ``task`` is the task or group name, ``name`` the metric name, and
``filter`` the score name when it differs from the metric name (``micro``), since it plays the
part of lm-eval's filter: the variant of one metric. The images' lm-eval adapter flattens lm-eval's
``"exact_match,strict-match"`` into metric and score ``exact_match__strict-match``; that is split
back into ``exact_match`` / ``strict-match`` so the same benchmark reads the same whether it ran
in the NVIDIA image or in upstream lm-eval (``parser: lm_eval``).

Single-task harnesses report each task under ``groups`` too; a group whose name is already a
task is skipped, so no number appears twice.

simple-evals' code tasks (nvidia-simple-evals 26.3, humaneval) put the eval type under
``groups`` and each pass@k under ``tasks`` (``pass@1: metrics: score: ...``): those entries are
metrics of the eval type, read as task ``humaneval``, metric ``pass@1``, filter ``micro``.
Scores are kept as the harness reports them: bfcl's are percentages (0-100), most are 0-1.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from hpceval.tasks.adapters import NoResultsFound, read_results_text
from hpceval.tasks.result import Metric, TaskResult

RESULTS_FILE = "results.yml"
_PASS_AT_K = re.compile(r"^pass@\d+$")  # a metric that simple-evals reports as a task
_LM_EVAL_SEPARATOR = "__"  # eval-factory's lm-eval adapter: "metric,filter" -> "metric__filter"


class _Loader(yaml.SafeLoader):
    """Safe YAML that reads Python-tagged nodes as plain data.

    nemo-evaluator writes results.yml with ``yaml.dump``, not ``safe_dump``, so an enum or object
    that reaches the config or target comes out as ``!!python/object...``. Those parts are never
    read here; constructing them as plain mappings/lists keeps the scores readable without ever
    executing anything.
    """


def _plain(loader: yaml.SafeLoader, _suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_scalar(node)  # type: ignore[arg-type]


_Loader.add_multi_constructor("tag:yaml.org,2002:python/", _plain)
_Loader.add_multi_constructor("!", _plain)


def find_results_file(output_dir: Path) -> Path:
    """``results.yml`` directly in the output dir (where ``--output_dir`` puts it), else the
    newest one below it (launcher layouts put it under ``artifacts/``)."""
    direct = output_dir / RESULTS_FILE
    if direct.is_file():
        return direct
    found = sorted(output_dir.rglob(RESULTS_FILE), key=lambda p: (p.stat().st_mtime, str(p)))
    if not found:
        raise NoResultsFound(f"no eval-factory {RESULTS_FILE} under {output_dir}")
    return found[-1]


def load_results_yml(path: Path) -> dict[str, Any]:
    data = yaml.load(read_results_text(path), Loader=_Loader)  # a SafeLoader subclass
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping at the top level")
    return data


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _count(value: Any) -> int | None:
    number = _number(value)
    return int(number) if number is not None and number.is_integer() else None


def _names(metric: str, score: str) -> tuple[str, str | None]:
    if score != metric:
        return metric, score
    if _LM_EVAL_SEPARATOR in metric:
        name, _, filt = metric.rpartition(_LM_EVAL_SEPARATOR)
        if name and filt:
            return name, filt
    return metric, None


def _entry_metrics(task: str, entry: Any) -> list[Metric]:
    out: list[Metric] = []
    for metric_name, metric in sorted(_mapping(_mapping(entry).get("metrics")).items()):
        for score_name, score in sorted(_mapping(_mapping(metric).get("scores")).items()):
            value = _number(_mapping(score).get("value"))
            if value is None:
                continue
            stats = _mapping(score.get("stats"))
            stderr = _number(stats.get("stderr"))
            name, filt = _names(str(metric_name), str(score_name))
            out.append(Metric(task=task, name=name, value=value,
                              stderr=stderr if stderr is None or math.isfinite(stderr) else None,
                              filter=filt, n_samples=_count(stats.get("count"))))
    return out


def _walk_groups(groups: Any, seen: set[str], out: list[Metric]) -> None:
    for name, entry in sorted(_mapping(groups).items()):
        if name not in seen:
            seen.add(name)
            out.extend(_entry_metrics(str(name), entry))
        _walk_groups(_mapping(entry).get("groups"), seen, out)


def parse_results(data: Mapping[str, Any], task: str, source: str | None = None) -> TaskResult:
    results = data.get("results")
    if not isinstance(results, Mapping):
        raise ValueError(f"{source or RESULTS_FILE}: no 'results' mapping (not a nemo-evaluator "
                         "results.yml?)")
    config = _mapping(data.get("config"))
    metrics: list[Metric] = []
    tasks = _mapping(results.get("tasks"))
    for name, entry in sorted(tasks.items()):
        if _PASS_AT_K.match(str(name)) and config.get("type"):
            metrics.extend(replace(m, task=str(config["type"]), name=str(name))
                           for m in _entry_metrics(str(name), entry))
            continue
        metrics.extend(_entry_metrics(str(name), entry))
    _walk_groups(results.get("groups"), {str(n) for n in tasks}, metrics)

    versioning = _mapping(_mapping(data.get("metadata")).get("versioning"))
    git_hash = data.get("git_hash") or versioning.get("git-hash")
    return TaskResult(
        task=task, harness="eval-factory",
        # the image's core-evals commit: what pins the harness code inside the image
        harness_version=str(git_hash) if git_hash else None,
        metrics=metrics, source_file=source,
        extra=_jsonable({"eval_type": config.get("type"), "params": config.get("params") or {},
                         "versioning": versioning}),
    )


def _jsonable(value: Any) -> Any:
    # YAML can hold what JSON cannot (dates, tagged objects); results.json must always write.
    return json.loads(json.dumps(value, default=str))


def parse(output_dir: Path, task: str) -> TaskResult:
    path = find_results_file(output_dir)
    return parse_results(load_results_yml(path), task, str(path.relative_to(output_dir)))
