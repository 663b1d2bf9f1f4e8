"""Harness adapters: read a harness's own output and return the unified ``TaskResult``.

Parsers are registered by the name the catalogue records for each harness (``parser:``). Each
lives in its own module, imported on first use, so reading lm-eval JSON never imports YAML and
a compute node only loads the parser its task needs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from hpceval.registry import Registry
from hpceval.tasks.result import TaskResult

Parser = Callable[[Path, str], TaskResult]  # (harness output dir, hpceval task name)

# parser name (catalogue `parser:`) -> `parse(output_dir, task) -> TaskResult` of its module;
# another installed package adds a parser by a `hpceval.parsers` entry point to its function.
PARSERS: Registry[Parser] = Registry("results parser", "hpceval.parsers", lazy={
    "lm_eval": "hpceval.tasks.adapters.lm_eval:parse",
    "eval_factory": "hpceval.tasks.adapters.eval_factory:parse",
})


# A harness's results file is a summary (lm-eval's is tens of KiB even for MMLU's 57 subtasks);
# one larger than this is refused before it is read, not read whole (shared-cluster-4 N8).
MAX_RESULTS_BYTES = 32 << 20


def read_results_text(path: Path) -> str:
    """The text of a harness's results file, read only up to MAX_RESULTS_BYTES."""
    with path.open("rb") as handle:
        raw = handle.read(MAX_RESULTS_BYTES + 1)
    if len(raw) > MAX_RESULTS_BYTES:
        raise ValueError(f"{path.name} is larger than {MAX_RESULTS_BYTES >> 20} MiB: not a "
                         "results summary (not read)")
    return raw.decode("utf-8")


class NoResultsFound(FileNotFoundError):
    """The harness finished without writing the results file its parser reads."""


def get_parser(name: str) -> Parser:
    """The parser of a catalogue's ``parser:`` name (an UnknownName, a ValueError, if none)."""
    return PARSERS.get(name)
