"""Locate the data files hpceval ships: Jinja templates and site profiles.

In a wheel they live under ``hpceval/_data``; in a source checkout (editable install, tests)
they stay at the top of the repository, where admins expect to find them.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def _data_dir(name: str) -> Path:
    for candidate in (_PACKAGE_DIR / "_data" / name, _PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"hpceval data folder {name!r} not found next to {_PACKAGE_DIR}; the installation is broken"
    )


def install_owner() -> int:
    """The uid that owns this installation of hpceval (its package folder): whoever runs its
    code trusts that account already, so the profiles it ships are trusted as it is."""
    return _PACKAGE_DIR.stat().st_uid


def templates_dir() -> Path:
    return _data_dir("templates")


def site_configs_dir() -> Path:
    return _data_dir("site-configs")


def lm_eval_tasks_dir() -> Path:
    """lm-eval task folders hpceval ships (YAML, hooks and data), inside the package in a wheel
    and a checkout alike: a job's ``lm_eval --include_path`` (install on shared storage)."""
    return _PACKAGE_DIR / "tasks" / "lm_eval_tasks"
