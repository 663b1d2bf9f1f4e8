"""Other tools' configuration files, read as hpceval's: one package per tool, each behind the
one hook ``hpceval.config.translation.Translation`` (NeMo Evaluator's launcher: ``nemo``).

Composition calls the hook and nothing else of a package here, so a tool's compatibility can
be dropped on its own (``hpceval.config.translation.NATIVE`` reads hpceval's files only).
"""

from __future__ import annotations

from typing import Any

Translated = tuple[dict[str, Any], list[str]]  # a layer to merge, and the notes on it
