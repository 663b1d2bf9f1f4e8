"""Task catalogue: which benchmarks exist, in which harness image, and how to invoke them.

Public API::

    from hpceval.tasks import load_catalogue
    cat = load_catalogue()
    cat.list(harness="simple_evals", endpoint_type="chat")
    cat.resolve("ifeval").note   # "ifeval -> lm-evaluation-harness.ifeval (also in: codec, ...)"

Imports stay light (no YAML, Jinja or pandas here): the YAML parser is only imported when the
JSON index has to be rebuilt.
"""

from __future__ import annotations

from hpceval.tasks.catalogue import Catalogue
from hpceval.tasks.definitions import (
    ENDPOINT_TYPES,
    GENERIC_PARAMS,
    AmbiguousTaskError,
    CatalogueError,
    HarnessDef,
    Resolution,
    TaskDef,
    TaskLookupError,
    UnknownHarnessError,
    UnknownTaskError,
)
from hpceval.tasks.output import format_task_table, task_to_dict, tasks_to_json

__all__ = [
    "ENDPOINT_TYPES",
    "GENERIC_PARAMS",
    "AmbiguousTaskError",
    "Catalogue",
    "CatalogueError",
    "HarnessDef",
    "Resolution",
    "TaskDef",
    "TaskLookupError",
    "UnknownHarnessError",
    "UnknownTaskError",
    "format_task_table",
    "load_catalogue",
    "task_to_dict",
    "tasks_to_json",
]


def load_catalogue() -> Catalogue:
    """The built-in catalogue plus user catalogues ($XDG_CONFIG_HOME/hpceval/tasks,
    $HPCEVAL_TASKS_PATH), served from the JSON index cache when nothing changed."""
    from hpceval.tasks.loader import load_index

    return Catalogue.from_index(load_index())
