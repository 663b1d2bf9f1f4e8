"""Combine validated catalogue files into one set of harness and task records.

This is where cross-file rules live: shared command templates, tasks added to a harness defined
elsewhere, duplicate names, alias clashes and at most one canonical task per short name.
Output records hold effective values (harness settings merged into each task) and are plain
JSON, so the index cache can store them as they are.
"""

from __future__ import annotations

from typing import Any

from hpceval.tasks.definitions import CatalogueError
from hpceval.tasks.schema import validate_file

Record = dict[str, Any]


def assemble(documents: list[tuple[str, object]]) -> tuple[list[Record], list[Record]]:
    files = [(source, validate_file(data, source)) for source, data in documents]

    templates: dict[str, str] = {}
    template_source: dict[str, str] = {}
    for source, doc in files:
        for name, text in doc["templates"].items():
            if name in templates:
                raise CatalogueError(
                    source, f"templates.{name}", f"already defined in {template_source[name]}"
                )
            templates[name] = text
            template_source[name] = source

    harnesses: dict[str, Record] = {}
    harness_alias: dict[str, str] = {}
    for source, doc in files:
        h = doc["harness"]
        if not isinstance(h, dict):
            continue
        name = h["name"]
        if name in harnesses or name in harness_alias:
            first = harnesses[name]["source"] if name in harnesses else "an alias"
            raise CatalogueError(
                source, "harness.name", f"harness {name!r} already defined in {first}"
            )
        if h["command_from"] is not None:
            if h["command_from"] not in templates:
                raise CatalogueError(
                    source,
                    "harness.command_from",
                    f"no template {h['command_from']!r}; known: {', '.join(sorted(templates))}",
                )
            h["command"] = templates[h["command_from"]]
        _check_jinja(h["command"], source, "harness.command")
        h["source"] = source
        harnesses[name] = h
        for alias in h["aliases"]:
            if alias in harnesses or alias in harness_alias:
                raise CatalogueError(
                    source, "harness.aliases", f"{alias!r} is already a harness name"
                )
            harness_alias[alias] = name

    tasks: list[Record] = []
    seen: dict[tuple[str, str], str] = {}
    for source, doc in files:
        ref = doc["harness"]
        if ref is None:
            continue
        hname = ref["name"] if isinstance(ref, dict) else harness_alias.get(ref, ref)
        if hname not in harnesses:
            raise CatalogueError(source, "harness", f"unknown harness {ref!r}; define it first")
        harness = harnesses[hname]
        for i, task in enumerate(doc["tasks"]):
            key = (hname, task["name"])
            if key in seen:
                raise CatalogueError(
                    source,
                    f"tasks[{i}].name",
                    f"{hname}.{task['name']} already defined in {seen[key]}",
                )
            seen[key] = source
            tasks.append(_effective_task(harness, task, source))

    _check_aliases_and_canonical(tasks, harnesses)
    for h in harnesses.values():
        del h["command_from"]
    return list(harnesses.values()), tasks


def _effective_task(harness: Record, task: Record, source: str) -> Record:
    params = dict(harness["defaults"])
    extra = {**params.get("extra", {}), **task["params"].get("extra", {})}
    params.update(task["params"])
    if extra:
        params["extra"] = extra

    def pick(key: str) -> Any:
        return harness[key] if task[key] is None else task[key]

    return {
        "name": task["name"],
        "harness": harness["name"],
        "task_id": task["task_id"],
        "endpoint_type": task["endpoint_type"],
        "description": task["description"],
        "image": pick("image"),
        "sif": pick("sif"),
        "needs_gpu": pick("needs_gpu"),
        "needs_judge": pick("needs_judge"),
        "required_env": sorted(set(harness["required_env"]) | set(task["required_env"])),
        "canonical": task["canonical"],
        "aliases": task["aliases"],
        "data": task["data"],
        "needs_network": task["needs_network"],
        "samples": task["samples"],
        "requests_per_sample": task["requests_per_sample"],
        "params": params,
        "source": source,
    }


def _check_aliases_and_canonical(tasks: list[Record], harnesses: dict[str, Record]) -> None:
    # Short names that resolve on their own; tasks of qualified-only harnesses do not count.
    short: set[str] = {t["name"] for t in tasks if not harnesses[t["harness"]]["qualified_only"]}
    alias_owner: dict[str, str] = {}
    canonical_owner: dict[str, str] = {}
    for t in tasks:
        qualified = f"{t['harness']}.{t['name']}"
        for alias in t["aliases"]:
            if alias in short:
                raise CatalogueError(
                    t["source"], f"{qualified}.aliases", f"{alias!r} is already a task name"
                )
            if alias in alias_owner:
                raise CatalogueError(
                    t["source"],
                    f"{qualified}.aliases",
                    f"{alias!r} already names {alias_owner[alias]}",
                )
            alias_owner[alias] = qualified
        if t["canonical"]:
            if t["name"] in canonical_owner:
                raise CatalogueError(
                    t["source"],
                    f"{qualified}.canonical",
                    f"{canonical_owner[t['name']]} is already canonical for {t['name']!r}",
                )
            canonical_owner[t["name"]] = qualified


def _check_jinja(text: str, source: str, path: str) -> None:
    # Only on a cache miss: catching a broken template here names the file, instead of failing
    # later inside a batch job.
    import jinja2

    try:
        jinja2.Environment().parse(text)
    except jinja2.TemplateSyntaxError as exc:
        raise CatalogueError(
            source, path, f"Jinja syntax error (line {exc.lineno}): {exc.message}"
        ) from exc
