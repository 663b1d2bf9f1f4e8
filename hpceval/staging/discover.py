"""``hpceval tasks discover IMAGE.sif|VENV``: add the tasks an eval-factory image (or a venv
with the harness packages installed) holds to the user catalogue, so the catalogue is never
smaller than what the images hold.

Eval-factory images carry one Framework Definition File per harness package, at
``<site-packages>/core_evals/<pkg_name>/framework.yml``: ``framework`` (name, description),
``defaults`` (command, ``config.params``, ``supported_endpoint_types``) and ``evaluations``
(each with ``name``, ``description`` and ``defaults.config`` overriding the framework's). The
image's ``nemo-evaluator`` entrypoint selects an evaluation by ``config.type``, so that is the
catalogue's ``task_id``. Per-task settings stay in the image (the catalogue's eval-factory
template passes only what the run sets), so nothing of ``params`` is copied here.

The result is ``$XDG_CONFIG_HOME/hpceval/tasks/<harness>.yaml``: tasks added to the catalogue
harness the framework is (matched by name, alias, SIF name or image), or a new harness. It is
validated together with the whole catalogue, then written atomically.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpceval.staging.container import (
    FIND,
    DiscoverError,
    read_frameworks,
    read_installed_frameworks,
)
from hpceval.tasks.definitions import (
    ENDPOINT_TYPES,
    CatalogueError,
    HarnessDef,
    UnknownHarnessError,
)

__all__ = ["FIND", "MARKER", "DiscoverError", "Discovered", "discover", "parse_framework"]

MARKER = "# Written by `hpceval tasks discover`"
_ENV_SHAPED = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$")  # JUDGE_API_KEY, HF_TOKEN
_SECRET_KEY = re.compile(r"api_?key|token", re.IGNORECASE)
_TASK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
_HARNESS_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")


@dataclass
class Discovered:
    harness: str
    path: Path  # the catalogue file written (or that would be written)
    added: list[str] = field(default_factory=list)
    known: list[str] = field(default_factory=list)  # already in the catalogue
    skipped: list[str] = field(default_factory=list)  # with the reason
    new_harness: bool = False
    written: bool = False


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _one_line(text: object) -> str:
    return " ".join(str(text).split()) if text else ""


def _secret_names(params: object) -> list[str]:
    """Env var NAMES the harness reads secrets from (``judge.api_key: JUDGE_API_KEY``)."""
    names: set[str] = set()
    if isinstance(params, dict):
        for key, value in params.items():
            if isinstance(value, str) and _SECRET_KEY.search(str(key)) and _ENV_SHAPED.match(value):
                names.add(value)
            names.update(_secret_names(value))
    return sorted(names)


def _endpoint(config: dict[str, Any]) -> str | None:
    supported = config.get("supported_endpoint_types") or []
    if isinstance(supported, str):
        supported = [supported]
    return next((t for t in supported if t in ENDPOINT_TYPES), None)


def parse_framework(text: str, source: str) -> dict[str, Any]:
    """An FDF as {name, description, default_endpoint_type, tasks: [...], skipped: [...]}."""
    import yaml

    try:
        fdf = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise DiscoverError(f"{source}: not YAML: {exc}") from exc
    if not isinstance(fdf, dict) or not isinstance(fdf.get("framework"), dict):
        raise DiscoverError(f"{source}: no `framework:` section; not a framework definition")
    framework = fdf["framework"]
    name = str(framework.get("name") or "")
    if not _HARNESS_NAME.match(name):
        raise DiscoverError(f"{source}: framework.name {name!r} cannot be a harness name")
    defaults = fdf.get("defaults") or {}
    base = defaults.get("config") or {}
    default_endpoint = _endpoint(base) or "chat"
    tasks: list[dict[str, Any]] = []
    skipped: list[str] = []
    for i, evaluation in enumerate(fdf.get("evaluations") or []):
        ev_name = str((evaluation or {}).get("name") or "")
        config = _merge(base, ((evaluation or {}).get("defaults") or {}).get("config") or {})
        endpoint = _endpoint(config) if config.get("supported_endpoint_types") else (
            default_endpoint)
        task_id = str(config.get("type") or ev_name)
        if not _TASK_NAME.match(ev_name) and _TASK_NAME.match(task_id):
            ev_name = task_id  # a display name ("ARC Challenge"): the type is what runs
        if not _TASK_NAME.match(ev_name):
            skipped.append(f"evaluations[{i}]: name {ev_name!r} is not a task name")
            continue
        if endpoint is None:
            skipped.append(f"{ev_name}: endpoint types {config.get('supported_endpoint_types')}"
                           f" (hpceval knows {', '.join(ENDPOINT_TYPES)})")
            continue
        params = config.get("params") or {}
        extra = params.get("extra") if isinstance(params, dict) else None
        task: dict[str, Any] = {"name": ev_name}
        if task_id != ev_name:
            task["task_id"] = task_id
        task["endpoint_type"] = endpoint
        task["description"] = (_one_line(evaluation.get("description"))
                               or f"{ev_name} (from the {name} framework definition)")
        if isinstance(extra, dict) and isinstance(extra.get("judge"), dict):
            task["needs_judge"] = True
        secrets = _secret_names(params)
        if secrets:
            task["required_env"] = secrets
        tasks.append(task)
    description = (_one_line(framework.get("description")) or _one_line(framework.get("full_name"))
                   or f"{name} (eval-factory framework)")
    return {"name": name, "pkg_name": framework.get("pkg_name"), "description": description,
            "default_endpoint_type": default_endpoint, "tasks": tasks, "skipped": skipped}


def match_harness(framework: dict[str, Any], catalogue: Any, sif_name: str,
                  reference: str | None, only_framework: bool) -> HarnessDef | None:
    """The catalogue harness this framework is: by name or alias (also with - and _
    swapped, or the package name), else, when the image holds just this one, by SIF or image."""
    names = [framework["name"], framework["name"].replace("-", "_"),
             framework["name"].replace("_", "-"), str(framework.get("pkg_name") or "")]
    for name in dict.fromkeys(n for n in names if n):
        try:
            harness: HarnessDef = catalogue.harness(name)
            return harness
        except UnknownHarnessError:
            continue
    if only_framework:
        for harness in catalogue.harnesses.values():
            if harness.sif == sif_name or (reference and harness.image == reference):
                return harness
    return None


def discover(sif: Path, *, runtime: str = "apptainer", image: str | None = None,
             out_dir: Path | None = None, dry_run: bool = False) -> list[Discovered]:
    """Read every framework.yml in ``sif`` (an image, or a folder: a venv) and write what the
    catalogue lacks."""
    from hpceval.staging.images import read_sidecar
    from hpceval.tasks.loader import user_catalogue_paths

    if sif.is_dir():  # host-installed harness packages (a venv): no image to open
        reference = (image or "").removeprefix("docker://")
        texts = read_installed_frameworks(sif)
    elif not sif.is_file():
        raise DiscoverError(f"{sif}: no such image file or folder")
    else:
        sidecar = read_sidecar(sif)
        reference = (image or (sidecar or {}).get("reference") or "").removeprefix("docker://")
        texts = read_frameworks(runtime, sif)
    frameworks = [parse_framework(text, f"{sif}:{path}") for path, text in texts]
    folder = out_dir or user_catalogue_paths()[0]
    results: list[Discovered] = []
    for (path, _), framework in zip(texts, frameworks, strict=True):
        results.append(_write_one(framework, path, sif, reference or None, folder,
                                  len(frameworks) == 1, dry_run))
    return results


def _write_one(framework: dict[str, Any], fdf_path: str, sif: Path, reference: str | None,
               folder: Path, only: bool, dry_run: bool) -> Discovered:
    from hpceval.tasks import load_catalogue
    from hpceval.tasks.loader import catalogue_files

    catalogue = load_catalogue()  # the cached index: cheap
    harness = match_harness(framework, catalogue, sif.name, reference, only)
    target = folder / f"{harness.name if harness else framework['name']}.yaml"
    existing = _existing(target)
    # Judge against the catalogue without this file: its own tasks are kept below, and a
    # harness it defined itself must be defined again.
    own = str(target.resolve())
    if harness is not None and _same(harness.source, own):
        harness = None
        if existing and isinstance(existing.get("harness"), dict):
            reference = reference or existing["harness"].get("image")
    found = Discovered(harness.name if harness else framework["name"], target,
                       skipped=list(framework["skipped"]))
    mine = [t for t in catalogue.tasks
            if harness and t.harness == harness.name and not _same(t.source, own)]
    have = {t.name for t in mine}
    have_ids = {t.task_id for t in mine}
    kept = list(existing.get("tasks") or []) if existing else []
    kept_names = {t["name"] for t in kept}
    for task in framework["tasks"]:
        listed = task["name"] in have or task.get("task_id", task["name"]) in have_ids
        if listed or task["name"] in kept_names:  # in the catalogue, or in this very file
            found.known.append(task["name"])
        else:
            kept.append(task)
            found.added.append(task["name"])
    doc: dict[str, Any] = {"schema": 1}
    if harness is not None:
        doc["harness"] = harness.name
    else:
        if not reference:
            raise DiscoverError(
                f"{framework['name']} is not in the catalogue, so a new harness needs the image "
                f"reference {sif.name} was built from; pass --image REPO:TAG (`hpceval stage` "
                "records it beside the SIFs it pulls)")
        found.new_harness = True
        doc["harness"] = {
            "name": framework["name"], "description": framework["description"],
            "image": reference, "sif": sif.name, "runtime": "container",
            "parser": "eval_factory", "command_from": "eval-factory",
            "default_endpoint_type": framework["default_endpoint_type"]}
    doc["tasks"] = kept
    if not found.added and existing is not None:
        return found  # nothing new: leave the file (and its mtime, so the index) alone
    if not kept and harness is not None:
        return found  # every task is known: no file needed
    text = _render(doc, sif, fdf_path)
    _validate(text, [f for f in catalogue_files() if not _same(str(f), own)], target)
    if not dry_run:
        from hpceval.storage import atomic_write_text

        atomic_write_text(target, text)
        found.written = True
    return found


def _same(source: str, resolved: str) -> bool:
    return bool(source) and str(Path(source).resolve()) == resolved


def _existing(target: Path) -> dict[str, Any] | None:
    """A file discover wrote before (kept and extended); any other file there is refused."""
    import yaml

    if not target.exists():
        return None
    text = target.read_text(encoding="utf-8")
    if not text.startswith(MARKER):
        raise DiscoverError(f"{target} exists and was not written by `hpceval tasks discover`; "
                            "move it, or pass --out-dir to write elsewhere")
    data = yaml.safe_load(text)
    return data if isinstance(data, dict) else None


def _render(doc: dict[str, Any], sif: Path, fdf_path: str) -> str:
    import yaml

    header = (f"{MARKER} from {sif.name} ({fdf_path}) on {time.strftime('%Y-%m-%d')}.\n"
              "# Tasks the image's framework definition holds that the shipped catalogue lacks;\n"
              "# per-task settings stay in the image. Discover again to add more; it keeps\n"
              "# every task listed here.\n")
    return header + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=100)


def _validate(text: str, others: list[Path], target: Path) -> None:
    """The whole catalogue must still load with the new file in place (a clash with a task or
    alias elsewhere names both files) before the file is written."""
    import tempfile

    from hpceval.tasks.loader import build_index

    with tempfile.TemporaryDirectory(prefix="hpceval-discover-") as tmp:
        trial = Path(tmp) / target.name
        trial.write_text(text, encoding="utf-8")
        try:
            build_index([*others, trial])
        except CatalogueError as exc:
            raise DiscoverError(f"the discovered tasks do not fit the catalogue: {exc}") from exc
