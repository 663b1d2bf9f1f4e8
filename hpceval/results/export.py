"""Exporters: local files, MLflow, Weights & Biases. Re-exporting is idempotent.

* local: one file per run (``<invocation_id>.json`` or ``.csv``), rows in a fixed order, no
  timestamps: exporting again rewrites byte-identical files (atomically).
* MLflow: one MLflow run per (run, model, task), named and tagged ``hpceval.key`` =
  ``<invocation_id>/<model>/<task>``; a re-export finds it by that tag and only logs metrics
  that are new or changed, so no duplicate runs and no duplicate metric history.
* W&B: one W&B run per (run, model, task) with a deterministic run id (a hash of the same key)
  and ``resume="allow"``, so every export lands in the same W&B run; offline mode by default
  (compute clusters often have no internet: `wandb sync` later).

mlflow and wandb are optional extras, imported only here and only when asked for.
"""

from __future__ import annotations

import hashlib
import importlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpceval.errors import HpcevalError
from hpceval.results.table import render
from hpceval.storage import atomic_write_text

KEY_TAG = "hpceval.key"
_SORT = ["model", "task", "subtask", "metric", "filter"]
_MLFLOW_NAME = re.compile(r"[^A-Za-z0-9_\-. /]+")


class ExportError(HpcevalError, RuntimeError):
    """An exporter cannot run (missing optional package, bad destination)."""


@dataclass(frozen=True)
class ExportReport:
    created: int = 0
    updated: int = 0
    unchanged: int = 0


def export_local(frame: Any, out_dir: Path, fmt: str = "json") -> list[Path]:
    if fmt not in ("json", "csv"):
        raise ExportError(f"--format {fmt}: local export writes json or csv")
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for invocation_id, rows in frame.groupby("invocation_id", sort=True):
        ordered = rows.sort_values(_SORT, na_position="first").reset_index(drop=True)
        path = out_dir / f"{invocation_id}.{fmt}"
        text = render(ordered, fmt)
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            atomic_write_text(path, text)
        written.append(path)
    return written


def _groups(frame: Any) -> list[tuple[str, Any]]:
    return [(f"{inv}/{model}/{task}", rows)
            for (inv, model, task), rows in frame.groupby(["invocation_id", "model", "task"],
                                                          sort=True)]


def metric_name(row: Any) -> str:
    parts = [str(row.subtask), str(row.metric)]
    if row.filter is not None and row.filter == row.filter:  # NaN != NaN
        parts.append(str(row.filter))
    return _MLFLOW_NAME.sub("_", ".".join(parts))


def _metrics(rows: Any) -> dict[str, float]:
    return {metric_name(r): float(r.value) for r in rows.itertuples()}


def _params(key: str, rows: Any) -> dict[str, str]:
    first = rows.iloc[0]
    return {"invocation_id": str(first["invocation_id"]), "model": str(first["model"]),
            "task": str(first["task"]), "harness": str(first["harness"]),
            "harness_version": str(first["harness_version"]), "hpceval_key": key}


def export_mlflow(frame: Any, *, experiment: str = "hpceval",
                  tracking_uri: str | None = None) -> ExportReport:
    try:  # optional extra; imported by name so that type checking does not need it
        entities = importlib.import_module("mlflow.entities")
        tracking = importlib.import_module("mlflow.tracking")
    except ImportError as exc:
        raise ExportError("--dest mlflow needs the mlflow package: pip install "
                          "'hpceval[mlflow]' (or mlflow-skinny)") from exc
    import time

    Metric, Param = entities.Metric, entities.Param
    client = tracking.MlflowClient(tracking_uri=tracking_uri)
    found = client.get_experiment_by_name(experiment)
    exp_id = found.experiment_id if found else client.create_experiment(experiment)
    created = updated = unchanged = 0
    for key, rows in _groups(frame):
        quoted = key.replace("'", "\\'")
        existing = client.search_runs([exp_id], filter_string=f"tags.`{KEY_TAG}` = '{quoted}'",
                                      max_results=1)
        metrics = _metrics(rows)
        if existing:
            run_id, have = existing[0].info.run_id, existing[0].data.metrics
            todo = {k: v for k, v in metrics.items() if have.get(k) != v}
            params: dict[str, str] = {}
        else:
            run = client.create_run(exp_id, tags={KEY_TAG: key}, run_name=key)
            run_id, todo, params = run.info.run_id, metrics, _params(key, rows)
        if not todo and not params:
            unchanged += 1
            continue
        now = int(time.time() * 1000)
        client.log_batch(run_id, metrics=[Metric(k, v, now, 0) for k, v in todo.items()],
                         params=[Param(k, v) for k, v in params.items()])
        if existing:
            updated += 1
        else:
            client.set_terminated(run_id)
            created += 1
    return ExportReport(created, updated, unchanged)


def wandb_run_id(key: str) -> str:
    # W&B run ids: short, [a-z0-9]; the same key always gives the same id.
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]


def export_wandb(frame: Any, *, project: str = "hpceval", offline: bool = True,
                 directory: Path | None = None) -> ExportReport:
    try:
        wandb = importlib.import_module("wandb")
    except ImportError as exc:
        raise ExportError("--dest wandb needs the wandb package: pip install "
                          "'hpceval[wandb]'") from exc
    written = 0
    for key, rows in _groups(frame):
        run = wandb.init(project=project, id=wandb_run_id(key), name=key, resume="allow",
                         mode="offline" if offline else "online", config=_params(key, rows),
                         dir=str(directory) if directory else None, reinit="finish_previous")
        run.summary.update(_metrics(rows))
        run.finish()
        written += 1
    return ExportReport(created=written)
