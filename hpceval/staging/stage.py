"""``hpceval stage``: fetch on the login node everything an offline compute node cannot.

The plan is checked as a whole before anything is pulled (a config problem exits 2 having done
nothing); then each image is pulled or kept, each hub item fetched or found, and a manifest of
what the folder holds is written beside the images.
"""

from __future__ import annotations

import shlex
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpceval.config import ResolvedConfig
from hpceval.config.errors import ConfigError, ConfigIssue
from hpceval.runtimes import runtime_for
from hpceval.staging import data as hub
from hpceval.staging.images import ImageNeed, image_needs, read_sidecar
from hpceval.staging.pull import PullError, decide, image_lock, pull, remote_digest

MANIFEST = "hpceval-staging.json"
MANIFEST_FORMAT = 1
_UNSET: Any = object()


@dataclass
class StageItem:
    kind: str  # image | data
    name: str  # SIF path, or kind:repo for hub data
    where: str  # the config key that needs it
    action: str  # pulled, present, would-pull, fetched, cached, would-fetch, built, would-build,
    #              run-time, manual, failed
    detail: str = ""
    record: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.action not in ("failed", "manual")

    def line(self) -> str:
        text = f"{self.kind:<5} {self.action:<11} {self.name}"
        return f"{text}  ({self.detail})" if self.detail else text


@dataclass
class StageReport:
    items: list[StageItem] = field(default_factory=list)
    manifest: Path | None = None
    hints: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(item.ok for item in self.items)


def stage_command(resolved: ResolvedConfig) -> str:
    """``hpceval stage <run file> -o ...``, reconstructed for fix messages."""
    composed = resolved.composed
    argv = ["hpceval", "stage"]
    argv.append(str(composed.run_file) if composed.run_file else "RUN.yaml")
    overrides = dict.fromkeys(s[3:] for s in composed.sources.values() if s.startswith("-o "))
    for text in overrides:
        argv += ["-o", text]
    return " ".join(shlex.quote(a) for a in argv)


def plan_issues(configs: Sequence[ResolvedConfig],
                known: dict[str, str]) -> list[ConfigIssue]:
    """What stops staging before it starts: nowhere to put an offline run's images or hub
    data, or a SIF path whose source nobody named."""
    issues: list[ConfigIssue] = []
    for resolved in configs:
        ex = resolved.spec.execution
        for need in image_needs(resolved, known):
            if need.sif is None and ex.offline:
                issues.append(ConfigIssue(
                    "execution.image_dir", f"compute nodes are offline, but {need.in_job} "
                    f"({need.purpose}) would be pulled there at run time",
                    "set execution.image_dir to a shared folder; hpceval stage pulls images "
                    "into it"))
            elif need.sif is not None and need.reference is None and not need.sif.exists():
                issues.append(ConfigIssue(
                    need.where, f"{runtime_for(ex.container_runtime).staged_kind} {need.sif} "
                    "does not exist and nothing records which image it is built from",
                    f"{stage_command(resolved)} --pull {need.sif.name}=docker://REPO:TAG"))
        if ex.offline and not ex.hf_cache_dir:
            for item in hub.data_needs(resolved):
                issues.append(ConfigIssue(
                    "execution.hf_cache_dir", f"compute nodes are offline and {item.where} "
                    f"names {item.repo_id}, but there is no shared Hugging Face cache",
                    "set execution.hf_cache_dir to a shared folder; hpceval stage fills it"))
    return list(dict.fromkeys(issues))


def stage(configs: Sequence[ResolvedConfig], *, dry_run: bool = False, force: bool = False,
          known: dict[str, str] | None = None,
          downloader: Any = _UNSET, echo: Callable[[str], None] = lambda _: None
          ) -> StageReport:
    """Stage every image and hub item of ``configs`` (one per model of a sweep).

    Raises ConfigError (nothing done) when the plan cannot work; otherwise returns a report
    whose ``ok`` is False if any pull or download failed or must be run by hand.
    """
    known = {k: v.removeprefix("docker://") for k, v in (known or {}).items()}
    issues = plan_issues(configs, known)
    if issues:
        raise ConfigError(issues)
    report = StageReport()
    seen: set[str] = set()
    for resolved in configs:
        runtime = resolved.spec.execution.container_runtime
        for need in image_needs(resolved, known):
            key = str(need.sif or need.in_job)
            if key not in seen:
                seen.add(key)
                report.items.append(_stage_image(need, runtime, dry_run, force, echo))
                if need.where.endswith(".image") and need.pulled_at_run_time and need.sif:
                    report.hints.append(f"the job still pulls {need.in_job} at run time; to "
                                        f"run the staged {runtime_for(runtime).staged_kind}: "
                                        f"-o {need.where}={need.sif}")
    if downloader is _UNSET:
        downloader = hub.default_downloader()
    for resolved in configs:
        cache = resolved.spec.execution.hf_cache_dir
        for data in hub.data_needs(resolved):
            if data.key not in seen:
                seen.add(data.key)
                report.items.append(_stage_data(data, cache, dry_run, force, downloader, echo))
    if not dry_run:
        report.manifest = _write_manifest(configs[0], report)
    return report


def _stage_image(need: ImageNeed, runtime: str, dry_run: bool, force: bool,
                 echo: Callable[[str], None]) -> StageItem:
    if need.sif is None:
        return StageItem("image", need.in_job, need.where, "run-time",
                         "no execution.image_dir: the job pulls it itself")
    name = str(need.sif)
    if need.reference is None:  # exists (plan_issues refused the missing ones)
        return StageItem("image", name, need.where, "present", "source unknown; kept as is",
                         read_sidecar(need.sif))
    digest = remote_digest(need.reference)
    choice = decide(need.sif, need.reference, digest, force=force)
    if not choice.pull:
        return StageItem("image", name, need.where, "present", choice.reason,
                         read_sidecar(need.sif))
    if dry_run:
        return StageItem("image", name, need.where, "would-pull",
                         f"{choice.reason}; from docker://{need.reference}")
    echo(f"pulling docker://{need.reference} -> {name} ({choice.reason}) ...")
    try:
        with image_lock(need.sif):
            # another stager may have pulled it while this one waited for the lock
            choice = decide(need.sif, need.reference, digest, force=force)
            if not choice.pull:
                return StageItem("image", name, need.where, "present", choice.reason,
                                 read_sidecar(need.sif))
            record = pull(runtime, need.sif, need.reference, digest, need.purpose)
    except (PullError, OSError) as exc:
        return StageItem("image", name, need.where, "failed", str(exc))
    return StageItem("image", name, need.where, "pulled", record["pulled_from"], record)


def _stage_data(need: hub.DataNeed, cache: str | None, dry_run: bool, force: bool,
                downloader: hub.Downloader | None, echo: Callable[[str], None]) -> StageItem:
    if cache is None:
        return StageItem("data", need.key, need.where, "run-time",
                         "no execution.hf_cache_dir: the job downloads it itself")
    folder = hub.cache_dir_for(need, cache)
    if hub.is_cached(need, cache) and not force:
        return StageItem("data", need.key, need.where, "cached", str(folder))
    if need.kind == "dataset":
        return _stage_dataset(need, cache, dry_run, echo)
    if dry_run:
        return StageItem("data", need.key, need.where, "would-fetch", str(folder))
    if downloader is None:
        return StageItem("data", need.key, need.where, "manual",
                         "huggingface_hub is not installed; run: "
                         + hub.manual_command(need, cache))
    echo(f"fetching {need.kind} {need.repo_id} into {hub.hub_dir(cache)} ...")
    try:
        snapshot = hub.fetch(need, cache, downloader)
    except Exception as exc:  # hub errors have many types; the message is what matters
        return StageItem("data", need.key, need.where, "failed",
                         f"{type(exc).__name__}: {exc}{hub.token_hint()}")
    return StageItem("data", need.key, need.where, "fetched", snapshot,
                     {"repo_id": need.repo_id, "kind": need.kind, "snapshot": snapshot})


def _stage_dataset(need: hub.DataNeed, cache: str, dry_run: bool,
                   echo: Callable[[str], None]) -> StageItem:
    """A dataset is built from the package that ships it (no network), else left to the user:
    huggingface_hub alone cannot fill the cache that ``load_dataset`` reads offline."""
    folder = str(hub.datasets_dir(cache))
    packaged = hub.PACKAGED_DATASETS.get(need.repo_id)
    if packaged is None:
        return StageItem("data", need.key, need.where, "manual",
                         "no package ships it; on a machine that reaches the hub run: "
                         + hub.dataset_manual_command(need, cache))
    python = hub.harness_python()
    if python is None:
        return StageItem("data", need.key, need.where, "manual",
                         f"{packaged.package} ships it, but no nemo-evaluator on PATH: put the "
                         "harness venv's bin/ on PATH (bash scripts/evalfactory/install.sh)")
    if dry_run:
        return StageItem("data", need.key, need.where, "would-build",
                         f"{folder}, from {packaged.package}")
    echo(f"building dataset {need.repo_id} from {packaged.package} into {folder} ...")
    try:
        built = hub.build_packaged(need, cache, python)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        return StageItem("data", need.key, need.where, "failed", str(exc))
    return StageItem("data", need.key, need.where, "built", built,
                     {"repo_id": need.repo_id, "kind": need.kind, "folder": built,
                      "from_package": packaged.package})


def _write_manifest(resolved: ResolvedConfig, report: StageReport) -> Path | None:
    """Merge this stage's items into ``<image_dir>/hpceval-staging.json`` (or the HF cache's
    folder without an image_dir), under a lock: several runs stage into one folder."""
    from filelock import FileLock

    from hpceval.storage import atomic_write_json, read_json_object

    ex = resolved.spec.execution
    folder = ex.image_dir or ex.hf_cache_dir
    done = [i for i in report.items if i.record is not None]
    if folder is None or not done:
        return None
    path = Path(folder) / MANIFEST
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path.with_name(f".{MANIFEST}.lock")), timeout=600):
        manifest = read_json_object(path) or {"format": MANIFEST_FORMAT, "images": {}, "data": {}}
        for item in done:
            section = "images" if item.kind == "image" else "data"
            entry = dict(item.record or {})
            entry["staged_for"] = item.where
            manifest.setdefault(section, {})[
                Path(item.name).name if item.kind == "image" else item.name] = entry
        manifest["updated_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        atomic_write_json(path, manifest)
    return path


