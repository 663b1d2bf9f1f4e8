"""Moved to ``hpceval.runs.cost`` (accounting of a run's jobs is the runs layer's). This
re-export keeps branches written against the old path importing; new code imports
``hpceval.runs.cost``."""

from __future__ import annotations

from hpceval.runs.cost import *  # noqa: F403
