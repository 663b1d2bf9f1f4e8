"""Validate one parsed catalogue file and normalise it into JSON-ready records.

Every error names the file and the key path (`tasks[12].endpoint_type`), because catalogue files
are edited by hand, by admins and users alike. Unknown keys are errors too: a typo such as
`needs_gpus: true` must not silently become "needs no GPU".
"""

from __future__ import annotations

import re
from typing import Any

from hpceval.runtimes import IMAGE, PLACES, from_image
from hpceval.tasks.adapters import PARSERS
from hpceval.tasks.definitions import ENDPOINT_TYPES, GENERIC_PARAMS, CatalogueError

SCHEMA_VERSION = 1

_HARNESS_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")  # no dots: "harness.task" splits on "."
_TASK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# What a task reads at run time besides the model: "hf-dataset:<org>/<name>" (the kinds and how
# each is staged: hpceval/staging/data.py)
_DATA_ITEM = re.compile(r"^hf-dataset:[A-Za-z0-9][\w.-]*/[\w.-]+$")

_FILE_KEYS = {"schema", "harness", "tasks", "templates"}
_HARNESS_KEYS = {
    "name", "description", "image", "sif", "upstream_image", "pip_package", "runtime",
    "required_env", "needs_gpu", "needs_judge", "qualified_only", "parser", "command",
    "command_from", "default_endpoint_type", "defaults", "aliases",
}  # fmt: skip
_TASK_KEYS = {
    "name", "task_id", "endpoint_type", "description", "needs_gpu", "needs_judge",
    "required_env", "canonical", "aliases", "params", "image", "sif", "data", "needs_network",
    "samples", "requests_per_sample",
}  # fmt: skip
_NUMERIC_PARAMS = set(GENERIC_PARAMS) - {"extra"}


class _Check:
    """Typed accessors that raise CatalogueError naming the file and key path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, path: str, message: str) -> CatalogueError:
        return CatalogueError(self.source, path, message)

    def mapping(self, value: object, path: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, f"expected a mapping, got {type(value).__name__}")
        for key in value:
            if not isinstance(key, str):
                raise self.fail(path, f"keys must be strings, got {key!r}")
        return value

    def keys(self, value: dict[str, Any], allowed: set[str], path: str) -> None:
        unknown = sorted(set(value) - allowed)
        if unknown:
            where = f"{path}." if path else ""
            raise self.fail(
                f"{where}{unknown[0]}", f"unknown key; allowed: {', '.join(sorted(allowed))}"
            )

    def string(self, obj: dict[str, Any], key: str, path: str, *, required: bool = False) -> Any:
        value = obj.get(key)
        if value is None:
            if required:
                raise self.fail(f"{path}.{key}" if path else key, "required")
            return None
        if not isinstance(value, str) or not value.strip():
            raise self.fail(f"{path}.{key}" if path else key, "expected a non-empty string")
        return value

    def count(self, obj: dict[str, Any], key: str, path: str) -> int | None:
        value = obj.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise self.fail(f"{path}.{key}", f"expected a whole number >= 1, got {value!r}")
        return value

    def boolean(self, obj: dict[str, Any], key: str, path: str) -> bool | None:
        value = obj.get(key)
        if value is not None and not isinstance(value, bool):
            raise self.fail(f"{path}.{key}", f"expected true or false, got {value!r}")
        return value

    def names(
        self, obj: dict[str, Any], key: str, path: str, pattern: re.Pattern[str]
    ) -> list[str]:
        value = obj.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(f"{path}.{key}", "expected a list of strings")
        for i, item in enumerate(value):
            if not isinstance(item, str) or not pattern.match(item):
                raise self.fail(f"{path}.{key}[{i}]", f"invalid name {item!r}")
        return list(value)

    def params(self, obj: dict[str, Any], key: str, path: str) -> dict[str, Any]:
        raw = obj.get(key)
        if raw is None:
            return {}
        where = f"{path}.{key}"
        params = self.mapping(raw, where)
        self.keys(params, set(GENERIC_PARAMS), where)
        for name, value in params.items():
            if name == "extra":
                self.mapping(value, f"{where}.extra")
            elif value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float)
            ):
                raise self.fail(f"{where}.{name}", f"expected a number or null, got {value!r}")
        return dict(params)


def validate_file(data: object, source: str) -> dict[str, Any]:
    """Return {"harness": dict | str | None, "tasks": [...], "templates": {...}} for one file."""
    check = _Check(source)
    if data is None:
        raise check.fail("", "file is empty")
    doc = check.mapping(data, "(top level)")
    check.keys(doc, _FILE_KEYS, "")
    schema = doc.get("schema", SCHEMA_VERSION)
    if schema != SCHEMA_VERSION:
        raise check.fail(
            "schema", f"unsupported schema {schema!r}; this hpceval reads {SCHEMA_VERSION}"
        )

    templates: dict[str, str] = {}
    if doc.get("templates") is not None:
        for name, text in check.mapping(doc["templates"], "templates").items():
            if not isinstance(text, str) or not text.strip():
                raise check.fail(f"templates.{name}", "expected a non-empty Jinja string")
            templates[name] = text

    harness: dict[str, Any] | str | None = None
    raw_harness = doc.get("harness")
    if isinstance(raw_harness, str):
        # A user file that only adds tasks to an existing harness names it.
        harness = raw_harness
    elif raw_harness is not None:
        harness = _validate_harness(check, raw_harness)

    raw_tasks = doc.get("tasks")
    tasks: list[dict[str, Any]] = []
    if raw_tasks is not None:
        if not isinstance(raw_tasks, list):
            raise check.fail("tasks", "expected a list of task mappings")
        if harness is None:
            raise check.fail("harness", "required when the file lists tasks")
        seen: set[str] = set()
        for i, raw in enumerate(raw_tasks):
            task = _validate_task(check, raw, f"tasks[{i}]")
            if task["name"] in seen:
                raise check.fail(f"tasks[{i}].name", f"duplicate task {task['name']!r}")
            seen.add(task["name"])
            tasks.append(task)
    return {"harness": harness, "tasks": tasks, "templates": templates}


def _validate_harness(check: _Check, raw: object) -> dict[str, Any]:
    h = check.mapping(raw, "harness")
    check.keys(h, _HARNESS_KEYS, "harness")
    name = check.string(h, "name", "harness", required=True)
    if not _HARNESS_NAME.match(name):
        raise check.fail("harness.name", f"invalid harness name {name!r} (letters, digits, _ -)")
    runtime = h.get("runtime", IMAGE)
    if runtime not in PLACES:
        raise check.fail("harness.runtime", f"expected {' or '.join(PLACES)}, got {runtime!r}")
    image = check.string(h, "image", "harness")
    sif = check.string(h, "sif", "harness")
    if from_image(runtime) and (image is None or sif is None):
        raise check.fail("harness.image", "a container harness needs both image and sif")
    if image is not None and ":" not in image.rsplit("/", 1)[-1] and "@" not in image:
        raise check.fail("harness.image", f"pin a tag or digest, got {image!r}")
    command = check.string(h, "command", "harness")
    command_from = check.string(h, "command_from", "harness")
    if (command is None) == (command_from is None):
        raise check.fail("harness.command", "give exactly one of command or command_from")
    endpoint = h.get("default_endpoint_type", "chat")
    if endpoint not in ENDPOINT_TYPES:
        raise check.fail("harness.default_endpoint_type", f"expected one of {ENDPOINT_TYPES}")
    parser = check.string(h, "parser", "harness", required=True)
    if parser not in PARSERS:  # found here, on the login node, not after the job has run
        raise check.fail("harness.parser", PARSERS.unknown(parser))
    return {
        "name": name,
        "description": check.string(h, "description", "harness", required=True),
        "image": image,
        "sif": sif,
        "upstream_image": check.string(h, "upstream_image", "harness"),
        "pip_package": check.string(h, "pip_package", "harness"),
        "runtime": runtime,
        "required_env": check.names(h, "required_env", "harness", _ENV_NAME),
        "needs_gpu": bool(check.boolean(h, "needs_gpu", "harness")),
        "needs_judge": bool(check.boolean(h, "needs_judge", "harness")),
        "qualified_only": bool(check.boolean(h, "qualified_only", "harness")),
        "parser": parser,
        "command": command,
        "command_from": command_from,
        "default_endpoint_type": endpoint,
        "defaults": check.params(h, "defaults", "harness"),
        "aliases": check.names(h, "aliases", "harness", _HARNESS_NAME),
    }


def _validate_task(check: _Check, raw: object, path: str) -> dict[str, Any]:
    t = check.mapping(raw, path)
    check.keys(t, _TASK_KEYS, path)
    name = check.string(t, "name", path, required=True)
    if not _TASK_NAME.match(name):
        raise check.fail(f"{path}.name", f"invalid task name {name!r}")
    endpoint = t.get("endpoint_type")
    if endpoint not in ENDPOINT_TYPES:
        raise check.fail(
            f"{path}.endpoint_type",
            f"expected one of {', '.join(ENDPOINT_TYPES)}; got {endpoint!r}",
        )
    return {
        "name": name,
        "task_id": check.string(t, "task_id", path) or name,
        "endpoint_type": endpoint,
        "description": check.string(t, "description", path, required=True),
        "needs_gpu": check.boolean(t, "needs_gpu", path),
        "needs_judge": check.boolean(t, "needs_judge", path),
        "required_env": check.names(t, "required_env", path, _ENV_NAME),
        "canonical": bool(check.boolean(t, "canonical", path)),
        "aliases": check.names(t, "aliases", path, _TASK_NAME),
        "params": check.params(t, "params", path),
        "image": check.string(t, "image", path),
        "sif": check.string(t, "sif", path),
        "data": check.names(t, "data", path, _DATA_ITEM),
        # why the task cannot run on offline nodes whatever is staged (the preflight says it)
        "needs_network": check.string(t, "needs_network", path),
        # what `status` needs for a request total (TaskDef.expected_requests); absent: unknown
        "samples": check.count(t, "samples", path),
        "requests_per_sample": check.count(t, "requests_per_sample", path),
    }
