"""Slurm's own formats, written once: time limits, sbatch flag names, --output file names.

Time limits: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S (minutes and seconds of at most two digits);
read by validation, the render (resume caps) and the local backend's runner.
"""

from __future__ import annotations

import re

# A long sbatch option name without its dashes ("mail-type"): validation and the header.
SBATCH_FLAG = re.compile(r"^[a-z][a-z0-9-]*$")
# What cannot be written on one #SBATCH line (tabs are fine inside quotes; newlines are not).
SBATCH_UNWRITABLE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_WALLTIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d{1,2}))?(?::(\d{1,2}))?$")


def walltime_seconds(text: str) -> int:
    """Seconds of a Slurm time limit; ValueError if `text` is not one."""
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


def slurm_filename(path: str) -> str:
    """A path for --output / --error: Slurm expands %j, %A, %a ..., so a literal % is %%."""
    return path.replace("%", "%%")
