"""hpceval: Slurm-native evaluation of large language models on HPC clusters.

The public Python API is small and mirrors the CLI; heavy modules load on first use so that
``import hpceval`` (and ``hpceval --help``) stay fast on a login node.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_API = {
    "load_config": "hpceval.config",
    "ConfigError": "hpceval.config",
}

__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'hpceval' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
