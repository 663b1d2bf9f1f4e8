"""Render task lists for humans (aligned table) and machines (stable JSON, see docs/tasks.md)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from hpceval.tasks.definitions import TaskDef

JSON_FIELDS: tuple[str, ...] = (
    "qualified_name",
    "name",
    "harness",
    "endpoint_type",
    "needs_gpu",
    "needs_judge",
    "required_env",
    "image",
    "sif",
    "description",
    "canonical",
    "aliases",
)

_DESCRIPTION_WIDTH = 70


def task_to_dict(task: TaskDef) -> dict[str, Any]:
    return {
        "qualified_name": task.qualified_name,
        "name": task.name,
        "harness": task.harness,
        "endpoint_type": task.endpoint_type,
        "needs_gpu": task.needs_gpu,
        "needs_judge": task.needs_judge,
        "required_env": sorted(task.required_env),
        "image": task.image,
        "sif": task.sif,
        "description": task.description,
        "canonical": task.canonical,
        "aliases": sorted(task.aliases),
    }


def tasks_to_json(tasks: Iterable[TaskDef]) -> str:
    """A JSON list ordered by qualified_name, keys sorted: byte-identical for the same tasks."""
    items = sorted((task_to_dict(t) for t in tasks), key=lambda d: str(d["qualified_name"]))
    return json.dumps(items, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def format_task_table(tasks: Iterable[TaskDef]) -> str:
    # JUDGE: the task asks a second model (a judge), which the run must provide
    rows = [
        (t.name, t.harness, t.endpoint_type, "yes" if t.needs_gpu else "no",
         "yes" if t.needs_judge else "no", _short(t.description))
        for t in tasks
    ]
    header = ("NAME", "HARNESS", "TYPE", "GPU", "JUDGE", "DESCRIPTION")
    widths = [max([len(header[i])] + [len(r[i]) for r in rows]) for i in range(5)]
    lines = []
    for row in [header, *rows]:
        cells = [row[i].ljust(widths[i]) for i in range(5)] + [row[5]]
        lines.append("  ".join(cells).rstrip())
    harness_count = len({r[1] for r in rows})
    noun = "task" if len(rows) == 1 else "tasks"
    harness_noun = "harness" if harness_count == 1 else "harnesses"
    lines.append(f"{len(rows)} {noun} in {harness_count} {harness_noun}")
    return "\n".join(lines) + "\n"


def _short(text: str) -> str:
    # One line per task: collapse whitespace and cut long descriptions.
    text = " ".join(text.split())
    if len(text) <= _DESCRIPTION_WIDTH:
        return text
    return text[: _DESCRIPTION_WIDTH - 3].rstrip() + "..."
