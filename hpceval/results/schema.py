"""Moved to ``hpceval.tasks.result`` (the harness adapters return it; tasks sits below results).
This re-export keeps branches written against the old path importing; new code imports
``hpceval.tasks.result``."""

from __future__ import annotations

from hpceval.tasks.result import *  # noqa: F403
from hpceval.tasks.result import Metric as Metric
from hpceval.tasks.result import TaskResult as TaskResult
