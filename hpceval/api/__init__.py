"""The Python API: every verb of the CLI, as functions (docs/controller.md has examples).

    from hpceval.api import submit, status, results, render, evaluate

The CLI calls these and only formats what they return, so a script gets the same checks, the
same errors (``hpceval.errors.HpcevalError``: message, fix, exit_code) and typed results.
``hpceval.results`` and ``hpceval.render`` are subpackages, so at the top level these two are
``hpceval.load_results`` and ``hpceval.render_scripts``; the others are ``hpceval.submit``,
``hpceval.status`` and ``hpceval.evaluate``. Everything heavy is imported inside the calls.

The verbs live in ``_``-private modules by topic (``_runs``: plan, render, preflight, submit,
status, info, logs, kill, resume; ``_track``: status with GPU-hours and flags; ``_results``:
results, cost, reports, export, compare, gate; ``_site``: evaluate, watch, stage, discover, doctor;
``_lists``: runs, watches, profiles, tasks; ``_load``: the config and run lookups they
share); import them from here.
"""

from __future__ import annotations

from hpceval.api._lists import profiles, runs, tasks, watches
from hpceval.api._load import ConfigSource, RunSource, find, find_watch, is_watch, load
from hpceval.api._results import (
    STATS_HINT,
    Exported,
    GateResult,
    SideNotFound,
    compare,
    cost,
    cost_of,
    export,
    gate,
    results,
    run_dirs,
    side,
    watch_points,
    write_report,
    write_step_report,
)
from hpceval.api._runs import (
    Preflight,
    RunInfo,
    RunLogs,
    SubmitFailed,
    WatchKill,
    info,
    kill,
    kill_watch,
    logs,
    plan,
    preflight,
    print_logs,
    render,
    resume,
    status,
    submit,
)
from hpceval.api._site import (
    discover,
    doctor,
    doctor_report,
    evaluate,
    resume_watch,
    stage,
    stop_watch,
    watch,
    watch_status,
    watch_steps,
)
from hpceval.api._track import LIVE_POLL_S, RunStatus, Tracking, task_flags, track
from hpceval.backends import CancelReport  # what kill returns: the CLI formats it

# Top-level names (hpceval.load_results, hpceval.render_scripts): see the module docstring.
load_results = results
render_scripts = render

__all__ = [
    "LIVE_POLL_S",
    "STATS_HINT",
    "CancelReport",
    "ConfigSource",
    "Exported",
    "GateResult",
    "Preflight",
    "RunInfo",
    "RunLogs",
    "RunSource",
    "RunStatus",
    "SideNotFound",
    "SubmitFailed",
    "Tracking",
    "WatchKill",
    "compare",
    "cost",
    "cost_of",
    "discover",
    "doctor",
    "doctor_report",
    "evaluate",
    "export",
    "find",
    "find_watch",
    "gate",
    "info",
    "is_watch",
    "kill",
    "kill_watch",
    "load",
    "load_results",
    "logs",
    "plan",
    "preflight",
    "print_logs",
    "profiles",
    "render",
    "render_scripts",
    "results",
    "resume",
    "resume_watch",
    "run_dirs",
    "runs",
    "side",
    "stage",
    "status",
    "stop_watch",
    "submit",
    "task_flags",
    "tasks",
    "track",
    "watch",
    "watch_points",
    "watch_status",
    "watch_steps",
    "watches",
    "write_report",
    "write_step_report",
]
