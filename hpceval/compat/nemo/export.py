"""NeMo Evaluator's auto-export, read with its meaning: ``execution.auto_export.destinations``
and the ``export:`` section become hpceval's ``export:`` (a dependent export job after the run).

Keys of a destination that hpceval's exporters have no counterpart for are reported in a note,
never silently dropped; a destination hpceval cannot send to is refused.
"""

from __future__ import annotations

from typing import Any

from hpceval.errors import ConfigIssue

# NEL key -> hpceval key, per destination (the values mean the same).
KEPT = {
    "local": {"output_dir": "output_dir", "format": "format"},
    "mlflow": {"tracking_uri": "tracking_uri", "experiment_name": "experiment_name"},
    "wandb": {"project": "project"},
}
_WHY = {
    "local": "the local exporter writes one file per run (json or csv)",
    "mlflow": "every metric of every task is logged, with the run's parameters as params and "
              "one MLflow run per (run, model, task); no tags, descriptions, logs or artifacts",
    "wandb": "every metric is logged, one W&B run per (run, model, task) in export.wandb."
             "project; entity, names and tags come from the W&B environment (WANDB_ENTITY)",
}
NATIVE = {"destinations", "local", "mlflow", "wandb"}


def translate_export(layer: dict[str, Any], notes: list[str], issues: list[ConfigIssue],
                     source: str) -> None:
    execution = layer.get("execution")
    auto = execution.pop("auto_export", None) if isinstance(execution, dict) else None
    export = layer.get("export")
    if isinstance(auto, dict):
        destinations = auto.pop("destinations", None)
        if destinations is not None:
            (layer.setdefault("export", {}) if isinstance(export, dict) or export is None
             else {}).setdefault("destinations", destinations)
        for name in auto:
            notes.append(f"{source}: execution.auto_export.{name} is ignored: the export job "
                         "runs hpceval's own exporters with the Python that runs the job")
    elif auto is not None:
        issues.append(ConfigIssue("execution.auto_export", "is not a mapping",
                                  "write auto_export: {destinations: [local|mlflow|wandb]}"))
    export = layer.get("export")
    if not isinstance(export, dict):
        return
    for dest in list(export):
        if dest in NATIVE:
            continue
        issues.append(ConfigIssue(f"export.{dest}", f"export to {dest!r} is not supported "
                                  f"(in the {source})", "use local, mlflow or wandb, and send "
                                  "the local files on from there"))
    for dest, kept in KEPT.items():
        settings = export.get(dest)
        if not isinstance(settings, dict):
            continue
        for name in [n for n in settings if n not in kept]:
            settings.pop(name)
            notes.append(f"{source}: export.{dest}.{name} is ignored: {_WHY[dest]}")
