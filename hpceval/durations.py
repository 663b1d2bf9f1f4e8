"""Time limits as configs write them: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S (minutes and seconds
of at most two digits).

The form is Slurm's, and NeMo Evaluator's configs use it for every executor, so it is the
config's syntax, not one backend's: validation, the render (resume caps), the local runner's
timeout and the Slurm backend's limits all read it here; and how a duration is shown to a
person (``span``). A leaf module: it imports nothing of hpceval's.
"""

from __future__ import annotations

import re

_WALLTIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d{1,2}))?(?::(\d{1,2}))?$")


def walltime_seconds(text: str) -> int:
    """Seconds of a time limit; ValueError if `text` is not one."""
    match = _WALLTIME.match(text.strip())
    if match is None:
        raise ValueError(f"not a Slurm time limit: {text!r}")
    days, a, b, c = (int(g) if g else None for g in match.groups())
    assert a is not None
    if days is None:
        if b is None:
            return a * 60
        return a * 60 + b if c is None else (a * 60 + b) * 60 + c
    return ((days * 24 + a) * 60 + (b or 0)) * 60 + (c or 0)


def walltime_minutes(text: str) -> int | None:
    """Whole minutes, rounded up as Slurm does; None if `text` is not a time limit."""
    try:
        seconds = walltime_seconds(text)
    except ValueError:
        return None
    return -(-seconds // 60)


def format_walltime(seconds: int) -> str:
    """``seconds`` as D-HH:MM:SS (HH:MM:SS under a day), which walltime_seconds reads back."""
    if seconds < 0:
        raise ValueError(f"a time limit is not negative: {seconds}")
    minutes, secs = divmod(seconds, 60)
    hours, mins = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    clock = f"{hours:02d}:{mins:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock


def span(seconds: float) -> str:
    """A duration as a person reads it: '46 s', '4 min', '2.5 h' (status and the ledger)."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
