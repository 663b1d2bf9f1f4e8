"""Rendering: a resolved run config in, the job script an admin reads and trusts out.

``render_job`` is pure (no files written, no commands run). Every value is shell-quoted by the
template machinery (see ``quoting``); templates live in the top-level ``templates/`` folder.
"""

from __future__ import annotations

from hpceval.render.context import ArraySpec, JobContext
from hpceval.render.job import VLLM_VERSION, render_job

__all__ = ["VLLM_VERSION", "ArraySpec", "JobContext", "render_job"]
