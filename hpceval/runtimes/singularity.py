"""container_runtime singularity: apptainer's predecessor, the same command line."""

from __future__ import annotations

from hpceval.runtimes import register
from hpceval.runtimes.base import Runtime


@register
class Singularity(Runtime):
    name = "singularity"
    order = 1
    env_prefix = "SINGULARITYENV_"
