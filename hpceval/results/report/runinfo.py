"""What exactly was run, for the report: read from the run directory, nothing recomputed.

Per run: run.json (models, who, when, hpceval version), run.yaml (the resolved config as
submitted), jobs.json (the job chain). Per model: its own run.yaml (checkpoint, deployment,
image, layout). Per finished task: manifest.json (harness name and version, container image,
job id, duration). An image's digest comes from the image reference itself (``@sha256:...``)
or from the sidecar ``hpceval stage`` wrote beside its SIF file; otherwise it is "not recorded".
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpceval.contract import CONFIG_FILE, MANIFEST_FILE, is_done, model_dir, task_dir
from hpceval.records import RunFileError, TaskRecord, read_run


@dataclass(frozen=True)
class TaskInfo:
    task: str
    key: str
    done: bool
    harness: str
    harness_version: str
    image: str
    digest: str
    job_id: str
    duration_s: float | None


@dataclass
class ModelInfo:
    key: str
    model_id: str
    checkpoint: str
    deployment: str
    server_image: str
    server_digest: str
    layout: str
    config_text: str
    jobs: list[str] = field(default_factory=list)
    tasks: list[TaskInfo] = field(default_factory=list)

    @property
    def wall_s(self) -> float:
        return sum(t.duration_s or 0.0 for t in self.tasks)


@dataclass
class RunInfo:
    invocation_id: str
    run_dir: str
    kind: str
    sweep: bool
    user: str
    created_at: float
    hpceval_version: str
    config_text: str
    models: list[ModelInfo] = field(default_factory=list)


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return ""


def image_digest(image: str | None, sif: str | None) -> str:
    if image and "@sha256:" in image:
        return "sha256:" + image.split("@sha256:", 1)[1]
    if sif:
        from hpceval.staging.images import read_sidecar

        sidecar = read_sidecar(Path(sif))
        if sidecar and sidecar.get("digest"):
            return str(sidecar["digest"])
    return "not recorded" if image or sif else ""


def layout_text(config: dict[str, Any], layout: dict[str, Any] | None) -> str:
    """'2 node(s) x 4 GPU(s): 4 instance(s) x 2 GPU(s), TP 2, PP 1' from a model's resolved
    config and the layout submit computed (run.json); older runs get it computed here."""
    ex, dep = config.get("execution") or {}, config.get("deployment") or {}
    nodes, gpus = ex.get("nodes", "?"), ex.get("gpus_per_node", "?")
    tp, pp = dep.get("tensor_parallel_size", 1), dep.get("pipeline_parallel_size", 1)
    if layout is None:
        layout = _layout(json.dumps(config, sort_keys=True))
    shape = (f": {layout['instances']} instance(s) x {layout['gpus_per_instance']} GPU(s)"
             if layout else "")
    return f"{nodes} node(s) x {gpus} GPU(s){shape}, TP {tp}, PP {pp}"


@functools.lru_cache(maxsize=256)
def _layout(config_json: str) -> dict[str, Any] | None:
    from hpceval.config.build import build_run_spec
    from hpceval.config.errors import ConfigError
    from hpceval.config.layout import compute_layout

    try:
        layout, _issues = compute_layout(build_run_spec(json.loads(config_json)))
    except (ConfigError, LookupError, TypeError, ValueError, AttributeError):
        return None  # an old or hand-edited run.yaml: show what is written
    return {"instances": layout.instances, "gpus_per_instance": layout.gpus_per_instance}


def _json_object(path: str) -> dict[str, Any]:
    """read_json_object without pathlib: one call per task of every run on the page."""
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _task_info(folder: str, task: TaskRecord) -> TaskInfo:
    done = is_done(folder)
    manifest = _json_object(f"{folder}/{MANIFEST_FILE}") if done else {}
    harness = manifest.get("harness") or {}
    slurm = manifest.get("slurm") or {}
    job = (f"{slurm['array_job_id']}_{slurm['array_task_id']}" if slurm.get("array_job_id")
           else str(slurm.get("job_id") or ""))
    image = manifest.get("image") or manifest.get("sif") or ""
    return TaskInfo(task=task.task, key=task.key, done=done,
                    harness=str(harness.get("name") or ""),
                    harness_version=str(harness.get("version") or ""), image=str(image),
                    digest=image_digest(manifest.get("image"), manifest.get("sif")),
                    job_id=job, duration_s=manifest.get("duration_s"))


def read_run_info(run_dir: Path) -> RunInfo | None:
    import yaml

    try:
        run = read_run(run_dir)
    except RunFileError:
        return None
    from hpceval.runs.jobs import read_jobs

    jobs = read_jobs(run_dir)
    info = RunInfo(run.invocation_id, str(run_dir), run.kind, run.sweep, run.user,
                   run.created_at, run.hpceval_version, _text(run_dir / CONFIG_FILE))
    for model in run.models:
        config_text = _text(model_dir(run_dir, model.key) / CONFIG_FILE)
        try:
            config = yaml.safe_load(config_text) or {}
        except yaml.YAMLError:
            config = {}
        dep = config.get("deployment") or {}
        entry_ids = [e.scheduler_id(model.index) for e in jobs.main_for(model.index)]
        image = dep.get("image") or ""
        info.models.append(ModelInfo(
            key=model.key, model_id=model.model_id,
            checkpoint=str(dep.get("checkpoint_path") or dep.get("hf_model_handle") or ""),
            deployment=model.deployment or str(dep.get("type", "")),
            server_image=str(image), server_digest=image_digest(
                image if image.startswith("docker://") else None,
                image if image.endswith(".sif") else None),
            layout=layout_text(config, model.layout), config_text=config_text,
            jobs=entry_ids,
            tasks=[_task_info(task_dir(str(run_dir), model.key, t.key), t) for t in model.tasks]))
    return info
