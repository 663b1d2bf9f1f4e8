"""Slurm's own formats, written once: sbatch flag names, --output file names, the comment.

Time limits are the config's syntax (hpceval.durations), which Slurm reads as they are.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

# A long sbatch option name without its dashes ("mail-type"): validation and the header.
SBATCH_FLAG = re.compile(r"^[a-z][a-z0-9-]*$")
# What cannot be written on one #SBATCH line (tabs are fine inside quotes; newlines are not).
SBATCH_UNWRITABLE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_COMMENT_PREFIX = "com"  # the shortest prefix of "comment" no other sbatch option shares


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


# sbatch's input environment variables: an SBATCH_<OPTION> of the submit shell (a site's module,
# a user's .bashrc) overrides the script's own #SBATCH line for that option. These three are
# not named after their option.
_INPUT_NAMES = {"time": "SBATCH_TIMELIMIT", "array": "SBATCH_ARRAY_INX",
                "mem": "SBATCH_MEM_PER_NODE"}
# A directive line: sbatch reads them up to the script's first command.
_DIRECTIVE = re.compile(r"^#SBATCH\s+--([a-z][a-z0-9-]*)")


def input_variable(option: str) -> str:
    """The submit environment's variable that sets long option ``option`` ("partition" ->
    SBATCH_PARTITION, "time" -> SBATCH_TIMELIMIT)."""
    return _INPUT_NAMES.get(option, "SBATCH_" + option.upper().replace("-", "_"))


def script_options(text: str) -> list[str]:
    """The long options a job script's #SBATCH lines set, as sbatch reads them: from the line
    after the interpreter's up to the first line that is neither a comment nor blank."""
    options = []
    for line in text.splitlines()[1:]:
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break
        if match := _DIRECTIVE.match(stripped):
            options.append(match.group(1))
    return options


def overridden_inputs(script_text: str, args: list[str], environ: dict[str, str]) -> list[str]:
    """The variables of ``environ`` that sbatch would let override what the script (its
    #SBATCH lines) or the command line (``args``) sets: the job must be what `hpceval render`
    shows, so these are left out of sbatch's environment. A variable for an option the job
    leaves unset (an SBATCH_ACCOUNT where execution.account is null) still applies."""
    return inputs_overridden([*script_options(script_text),
                              *(arg[2:].partition("=")[0] for arg in args
                                if arg.startswith("--"))], environ)


def inputs_overridden(options: list[str], environ: Mapping[str, str]) -> list[str]:
    """The variables of ``environ`` for the long ``options`` a job sets itself (its header's,
    its command line's): sbatch would let them override the job, so they are left out."""
    return sorted(name for name in {input_variable(option) for option in options}
                  if name in environ)
