"""Which container images a run needs, where the job expects each one, and where it comes from.

Shared by ``hpceval stage`` (pull what is missing) and the submit preflight (refuse what is
missing): both agree with the job script on the image a task runs from, which
``ResolvedTask.image`` (hpceval.config.tasks) decides for all three.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpceval.config import ResolvedConfig
from hpceval.config.aux_layout import server_deployments
from hpceval.images import DOCKER, sif_name
from hpceval.runtimes import runtime_for

SIDECAR_SUFFIX = ".json"


@dataclass(frozen=True)
class ImageNeed:
    """One image the job will run from."""

    where: str  # config key to point at in messages (deployment.image, evaluation.tasks.X)
    purpose: str  # "server" or "harness <name>"
    in_job: str  # what the job script names: a SIF path, or a docker:// reference
    sif: Path | None  # the SIF file stage writes (None: no image_dir to stage into)
    reference: str | None  # docker reference (no scheme) to pull it from; None: unknown

    @property
    def pulled_at_run_time(self) -> bool:
        return self.in_job.startswith(DOCKER)


def sidecar_path(sif: Path) -> Path:
    return sif.with_name(sif.name + SIDECAR_SUFFIX)


def read_sidecar(sif: Path) -> dict[str, Any] | None:
    """What ``hpceval stage`` recorded about a SIF it pulled, or None (absent or unreadable)."""
    try:
        data = json.loads(sidecar_path(sif).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("reference"), str) else None


def _from_image_value(value: str, where: str, purpose: str, image_dir: str | None,
                      known: dict[str, str], runtime: str) -> ImageNeed | None:
    """deployment.image or a task's container: a docker:// reference or an image file."""
    if value.startswith(DOCKER):
        ref = value[len(DOCKER):]
        name = runtime_for(runtime).image_file(sif_name(ref))
        sif = Path(image_dir) / name if image_dir else None
        return ImageNeed(where, purpose, value, sif, ref)
    if "://" in value:  # library://, oras://...: pulled by the runtime, not staged here
        return None
    sif = Path(value)
    sidecar = read_sidecar(sif)
    source = known.get(str(sif)) or known.get(sif.name)
    if source is None and sidecar is not None:
        source = sidecar["reference"]
    return ImageNeed(where, purpose, value, sif, source.removeprefix(DOCKER) if source else None)


def image_needs(resolved: ResolvedConfig,
                known: dict[str, str] | None = None) -> list[ImageNeed]:
    """Every image of one model's job, one entry per distinct image (first user wins).

    ``known`` maps a SIF path or file name to the docker reference it is built from, for SIF
    paths in the config that have no sidecar yet (``hpceval stage --pull SIF=docker://REF``).
    """
    spec = resolved.spec
    ex = spec.execution
    refs = known or {}
    if not runtime_for(ex.container_runtime).containers:
        return []  # render runs everything from the host then (or refuses the config)
    needs: list[ImageNeed] = []
    for key, served in server_deployments(spec):  # the model's server, and judges'
        if served.serves_from_image and served.image:
            need = _from_image_value(served.image, f"{key}.image", "server", ex.image_dir,
                                     refs, ex.container_runtime)
            staged = runtime_for(ex.container_runtime).staged_server_image(served.image,
                                                                           ex.image_dir)
            if need is not None and staged != served.image:  # the file the job runs
                need = dataclasses.replace(need, in_job=staged)
            if need is not None:
                needs.append(need)
    for rt in resolved.tasks:
        task, where = rt.task, rt.where
        purpose = f"harness {rt.harness.name}"
        if rt.spec.container:
            need = _from_image_value(rt.spec.container, f"{where}.container", purpose,
                                     ex.image_dir, refs, ex.container_runtime)
        elif not rt.in_container(ex):
            continue
        elif ex.image_dir and task.sif:  # the rule of ResolvedTask.image
            sif = Path(ex.image_dir) / runtime_for(ex.container_runtime).image_file(task.sif)
            need = ImageNeed(where, purpose, str(sif), sif, task.image)
        elif task.image:
            need = ImageNeed(where, purpose, DOCKER + task.image, None, task.image)
        else:
            continue  # loading the run refuses a container harness without an image
        if need is not None:
            needs.append(need)
    return _unique(needs)


def _unique(needs: list[ImageNeed]) -> list[ImageNeed]:
    seen: dict[str, ImageNeed] = {}
    for need in needs:
        seen.setdefault(str(need.sif) if need.sif else need.in_job, need)
    return list(seen.values())
