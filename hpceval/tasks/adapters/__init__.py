"""Harness adapters: read a harness's own output and return the unified ``TaskResult``.

Parsers are registered by the name the catalogue records for each harness (``parser:``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from hpceval.results.schema import TaskResult

Parser = Callable[[Path, str], TaskResult]  # (harness output dir, hpceval task name)


class NoResultsFound(FileNotFoundError):
    """The harness finished without writing the results file its parser reads."""


def get_parser(name: str) -> Parser:
    if name == "lm_eval":
        from hpceval.tasks.adapters.lm_eval import parse

        return parse
    raise KeyError(f"no results parser named {name!r} (known: lm_eval)")
