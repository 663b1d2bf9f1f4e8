"""``hpceval doctor``: what a site does to a job, found out before a GPU job fails.

`login` checks what the login node can see (partition, account/QOS by a test-only submission,
staged images and data, shared storage); `node` submits one short CPU job that reports what a
compute node sees. Both give `report.Line`s: one table, each line ok / warning / problem with
the fix. docs/sites.md, "Find out with hpceval doctor".
"""

from __future__ import annotations

from hpceval.doctor.report import Line, Report, Status

__all__ = ["Line", "Report", "Status"]
