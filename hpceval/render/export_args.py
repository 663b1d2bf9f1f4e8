"""The auto-export step's command line: export.* as options of the in-job exporter.

Render writes it into sweep and job scripts; the export step (job/export.py) parses it.
It lives in render so that render does not depend on results (the layer above it).
"""

from __future__ import annotations

from hpceval.config.schema import ExportSpec


def export_arguments(spec: ExportSpec, run_dir: str) -> list[str]:
    """export.* as the options of `python -m hpceval.job export` (its parser reads
    them back), for the rendered script: one --flag=value each."""
    args: list[str] = []
    for dest in dict.fromkeys(spec.destinations):
        args.append(f"--dest={dest}")
        if dest == "local":
            args += [f"--local-dir={spec.local.output_dir or run_dir + '/export'}",
                     f"--local-format={spec.local.format}"]
        elif dest == "mlflow":
            if spec.mlflow.tracking_uri:
                args.append(f"--mlflow-tracking-uri={spec.mlflow.tracking_uri}")
            args.append(f"--mlflow-experiment={spec.mlflow.experiment_name}")
        else:
            args.append(f"--wandb-project={spec.wandb.project}")
            if spec.wandb.online:
                args.append("--wandb-online")
    return args
