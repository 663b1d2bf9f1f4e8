"""container_runtime none: host-installed tools; servers and harnesses run without images."""

from __future__ import annotations

from typing import ClassVar

from hpceval.runtimes import register
from hpceval.runtimes.base import Runtime


@register
class NoRuntime(Runtime):
    name = "none"
    order = 3
    summary = "none (host-installed tools)"
    containers: ClassVar[bool] = False
    pull_cache_env = pull_temp_env = ()  # no images
