"""hpceval: Slurm-native evaluation of large language models on HPC clusters.

The public Python API is small and mirrors the CLI; heavy modules load on first use so that
``import hpceval`` (and ``hpceval --help``) stay fast on a login node.
"""

from __future__ import annotations

from typing import Any

from hpceval._version import __version__

_API = {
    "load_config": "hpceval.config",
    "ConfigError": "hpceval.config",
    # hpceval.results and hpceval.render are subpackages: their API functions are exposed here
    # as load_results and render_scripts (hpceval.api has both names).
    "submit": "hpceval.api",
    "status": "hpceval.api",
    "evaluate": "hpceval.api",
    "load_results": "hpceval.api",
    "render_scripts": "hpceval.api",
}

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'hpceval' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
