"""container_runtime apptainer: ``apptainer exec --cleanenv`` with SIF images."""

from __future__ import annotations

from hpceval.runtimes import register
from hpceval.runtimes.base import Runtime


@register
class Apptainer(Runtime):
    name = "apptainer"
    order = 0
    env_prefix = "APPTAINERENV_"
    pull_cache_env = ("APPTAINER_CACHEDIR",)  # over a SINGULARITY_ one the user may have set
    pull_temp_env = ("APPTAINER_TMPDIR",)
