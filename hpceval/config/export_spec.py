"""The ``export`` section: where results go after a run (`hpceval export`, or the dependent CPU
job that ``export.destinations`` submits), one sub-section per destination."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from hpceval.fields import key

ExportDestination = Literal["local", "mlflow", "wandb"]
ExportFormat = Literal["json", "csv"]


@dataclass(frozen=True)
class LocalExportSpec:
    output_dir: str | None = key(None, "folder for the files; default <run dir>/export")
    format: ExportFormat = key("json", "json | csv")


@dataclass(frozen=True)
class MlflowExportSpec:
    tracking_uri: str | None = key(
        None, "MLflow tracking URI the compute nodes reach (http://host:port, or file:/shared/"
        "path); default MLflow's own"
    )
    experiment_name: str = key("hpceval", "MLflow experiment")


@dataclass(frozen=True)
class WandbExportSpec:
    project: str = key("hpceval", "W&B project")
    online: bool = key(
        False, "sync at once (needs network and WANDB_API_KEY in the job's environment); "
        "default: offline files to sync later with `wandb sync`"
    )


@dataclass(frozen=True)
class ExportSpec:
    """Results sent somewhere after the run, by a dependent CPU job (`hpceval export`)."""

    destinations: list[ExportDestination] = key(
        [], "export after every run (NEL: execution.auto_export.destinations): local | mlflow "
        "| wandb; empty: run `hpceval export` by hand"
    )
    local: LocalExportSpec = field(default_factory=LocalExportSpec)
    mlflow: MlflowExportSpec = field(default_factory=MlflowExportSpec)
    wandb: WandbExportSpec = field(default_factory=WandbExportSpec)
