"""container_runtime singularity: apptainer's predecessor, the same command line."""

from __future__ import annotations

from hpceval.runtimes import register
from hpceval.runtimes.base import Runtime


@register
class Singularity(Runtime):
    name = "singularity"
    order = 1
    env_prefix = "SINGULARITYENV_"
    # and apptainer's names: a site's `singularity` is often apptainer's compatibility command,
    # which reads an APPTAINER_ variable (the user's own, say) before a SINGULARITY_ one
    pull_cache_env = ("SINGULARITY_CACHEDIR", "APPTAINER_CACHEDIR")
    pull_temp_env = ("SINGULARITY_TMPDIR", "APPTAINER_TMPDIR")
