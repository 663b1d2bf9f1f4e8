"""Fixtures for the Python API tests: support.runs' tiny catalogue and isolated caches (autouse)
and a counting fake Slurm."""

from __future__ import annotations

from support.runs import fake, isolated

__all__ = ["fake", "isolated"]
