"""deployment.type none: an external OpenAI-compatible endpoint; nothing is served in the job."""

from __future__ import annotations

from typing import ClassVar

from hpceval.engines import register
from hpceval.engines.base import Engine


@register
class NoEngine(Engine):
    name = "none"
    order = 0
    summary = "none (external endpoint)"
    template = "deployment/none.j2"
    serves: ClassVar[bool] = False
    model_source: ClassVar[bool] = False
    parallel: ClassVar[bool] = False
    multi_node: ClassVar[bool] = False
