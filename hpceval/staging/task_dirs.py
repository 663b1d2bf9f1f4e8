"""A task folder lm-eval imports (``params.extra.include_path``) is trusted like a profile.

lm-eval reads every YAML file under ``--include_path`` and imports the Python its ``!function``
tags name, as the user, in the job. A folder another user owns or can write (a 1777 scratch
folder, a group-writable project folder) lets them plant a task file, or swap one, and so run
code in the user's job. So the folder, every folder above it (root's sticky ones such as /tmp
aside) and everything in it must pass hpceval.trust's rule (owned by the user or root, not
writable by group or other), checked on the login node at submit, before anything is queued.
"""

from __future__ import annotations

import os
from pathlib import Path

from hpceval.config.compose import INCLUDE_PATH as KEY
from hpceval.config.errors import ConfigIssue
from hpceval.trust import untrusted

__all__ = ["KEY", "include_path_issue"]
MAX_ENTRIES = 20_000  # a task folder holds tens of files; more is not a task folder


def include_path_issue(folder: Path, key: str) -> ConfigIssue | None:
    """The refusal of task folder `folder` (config key `key`), or None when it is trusted."""
    problem = untrusted(folder, root=True, folders=True)
    culprit = folder
    if problem is None:
        culprit, problem = _inside(folder)
    if problem is None:
        return None
    what = "" if culprit == folder else f"{culprit} in it: "
    return ConfigIssue(key, f"refusing task folder {folder}: {what}{problem} (lm-eval imports "
                       "its task files, and the Python they name, as you)",
                       f"if it is yours: chmod -R go-w {folder}; else copy the tasks into a "
                       "folder of your own and point include_path at it")


def _inside(folder: Path) -> tuple[Path, str | None]:
    seen = 0
    for top, dirs, files in os.walk(folder):  # links are checked, not walked into
        for name in (*dirs, *files):
            path = Path(top) / name
            problem = untrusted(path, root=True, folders=False)
            if problem is not None:
                return path, problem
            seen += 1
            if seen >= MAX_ENTRIES:
                return folder, f"it holds more than {MAX_ENTRIES} entries"
    return folder, None
