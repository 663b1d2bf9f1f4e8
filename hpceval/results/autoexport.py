"""Kept only for job scripts rendered before the export step moved to ``python -m hpceval.job
export`` (a run submitted before an upgrade whose export job has not run yet): the same step,
by the module name those scripts carry. Nothing renders it any more; drop it one release on.
"""

from __future__ import annotations

import runpy
import sys

if __name__ == "__main__":
    sys.argv[1:1] = ["export"]
    runpy.run_module("hpceval.job", run_name="__main__", alter_sys=True)
