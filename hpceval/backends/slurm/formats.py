"""Slurm's own formats, written once: time limits, sbatch flag names, --output file names.

Time limits: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S (minutes and seconds of at most two digits);
read by validation, the render (resume caps) and the local backend's runner.
"""

from __future__ import annotations

import json
import re

# A long sbatch option name without its dashes ("mail-type"): validation and the header.
SBATCH_FLAG = re.compile(r"^[a-z][a-z0-9-]*$")
# What cannot be written on one #SBATCH line (tabs are fine inside quotes; newlines are not).
SBATCH_UNWRITABLE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_COMMENT_PREFIX = "com"  # the shortest prefix of "comment" no other sbatch option shares
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


def log_file(job: str, element: str | int | None = None) -> str:
    """A Slurm job's own log, one name for the header's --output pattern (log_file("%j"),
    log_file("%A", "%a") for an array) and for the readers of a job's log (its id, element)."""
    return f"slurm-{job}_{element}.log" if element is not None else f"slurm-{job}.log"


def run_comment(comment: str | None, invocation_id: str) -> str:
    """A run's jobs' --comment: it carries the run's invocation id, and `hpceval kill` cancels
    only jobs whose comment does (a jobs.json can name any job of the user's, a training job
    among them). After execution.sbatch_comment when one is set, or inside it, as the key
    "hpceval", when it is a JSON object (a site's reaper parses it: NeMo's idle-GPU reaper).
    A character no #SBATCH line can hold becomes "_" (hpceval's own ids have none)."""
    invocation_id = SBATCH_UNWRITABLE.sub("_", invocation_id)
    if not comment:
        return f"hpceval:{invocation_id}"
    try:
        data = json.loads(comment)
    except ValueError:
        data = None
    if isinstance(data, dict):
        return json.dumps({**data, "hpceval": invocation_id}, separators=(",", ":"))
    return f"{comment} hpceval:{invocation_id}"


def sets_comment(flag: str) -> bool:
    """Whether an #SBATCH flag name sets the job's comment: sbatch takes any unambiguous
    prefix of a long option ("comm" is --comment), and the last --comment wins, so such a
    flag would replace the one `run_comment` wrote and `hpceval kill` would leave the run's
    jobs alone. Config validation refuses it (execution.sbatch_comment is the way in)."""
    return len(flag) >= len(_COMMENT_PREFIX) and "comment".startswith(flag)


def carries_run(comment: str, invocation_id: str) -> bool:
    """Whether a job's comment (squeue %k) is one `run_comment` wrote for this run."""
    return (f"hpceval:{invocation_id}" in comment.split()
            or f'"hpceval":"{invocation_id}"' in comment)
