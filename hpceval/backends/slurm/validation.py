"""What a Slurm job cannot carry, checked when a run is loaded (SlurmBackend.spec_issues).

The config layer asks the backend of the run's execution type; these rules are Slurm's: values
written on `#SBATCH` lines, sbatch flag names, the --comment that `hpceval kill` relies on, and
the partition's, QOS's and association's time limits and the QOS the association grants. The
header (header.py) raises the same issues as a guard for configs built by hand, so `config
show` refuses what render would.
"""

from __future__ import annotations

from collections.abc import Iterator

from hpceval.backends.slurm.commands import SUBMIT
from hpceval.backends.slurm.formats import SBATCH_FLAG, SBATCH_UNWRITABLE, sets_comment
from hpceval.backends.views import ExecutionView
from hpceval.durations import walltime_minutes
from hpceval.errors import ConfigIssue

# Execution keys whose values the #SBATCH header carries as text.
HEADER_TEXT_KEYS = ("job_name", "account", "partition", "qos", "reservation", "constraint",
                    "walltime", "gpu_type", "mem", "sbatch_comment", "output_dir")


def spec_issues(ex: ExecutionView, *, ask: bool) -> list[ConfigIssue]:
    """Every issue of ``ex`` a Slurm job could not carry; ``ask``: sinfo, sacctmgr and scontrol
    may be asked for the walltime's limits and the QOS grants (at submit, not when rendering on
    another machine), for the partition, QOS and account the job will have (job_place)."""
    return [*_qos_issues(ex, ask), *_walltime_issues(ex, ask), *_flag_issues(ex),
            *_text_issues(ex)]


def sbatch_text_issue(text: str, key: str) -> ConfigIssue | None:
    if SBATCH_UNWRITABLE.search(text):
        return ConfigIssue(key, f"{text!r} contains a newline or control character, which "
                           "cannot be written on an #SBATCH line", "remove it")
    return None


def _qos_issues(ex: ExecutionView, ask: bool) -> Iterator[ConfigIssue]:
    from hpceval.backends.slurm.partitions import job_place, ungranted_qos

    if not ask:
        return
    place = job_place(ex)
    assoc = ungranted_qos(place.qos, place.partition, place.account) if place.qos else None
    if assoc is not None:
        yield ConfigIssue("execution.qos", f"{place.qos!r}{place.note} is not a QOS that "
                          f"{assoc.label} may use (it grants {', '.join(assoc.granted_qos)}): "
                          f"{SUBMIT} would refuse the job (Invalid qos specification)",
                          f"set execution.qos to one of {', '.join(assoc.granted_qos)}, or to "
                          "null for your default QOS (your site's admins grant others)")


def _walltime_issues(ex: ExecutionView, ask: bool) -> Iterator[ConfigIssue]:
    from hpceval.backends.slurm.partitions import job_place, time_limit

    wall = walltime_minutes(ex.walltime)
    if not ask or not wall:
        return
    place = job_place(ex)
    limit = time_limit(place.partition, place.qos, place.account)
    if limit is not None and wall > limit.minutes:
        yield ConfigIssue("execution.walltime", f"{ex.walltime} is more than {limit.what} "
                          f"({limit.minutes} minutes){place.note}: {SUBMIT} would refuse the "
                          "job or leave it pending for ever",
                          f"set execution.walltime to {limit.minutes} minutes or less "
                          "(auto-resume continues in a new allocation)")


def _flag_issues(ex: ExecutionView) -> Iterator[ConfigIssue]:
    for flag, value in ex.sbatch_extra_flags.items():
        if not SBATCH_FLAG.match(flag):
            yield ConfigIssue(f"execution.sbatch_extra_flags.{flag}",
                              f"is not an {SUBMIT} flag name",
                              "write the long name without dashes, e.g. mail-type")
        elif sets_comment(flag) and value is not None and value is not False:
            yield ConfigIssue(f"execution.sbatch_extra_flags.{flag}",
                              "sets --comment, which would replace the hpceval:<id> tag "
                              "hpceval kill looks for (kill would then leave the run's jobs "
                              "running)",
                              "move the value to execution.sbatch_comment: hpceval adds its tag "
                              "after it (or inside it, as the key hpceval, when it is a JSON "
                              "object)")


def _text_issues(ex: ExecutionView) -> Iterator[ConfigIssue]:
    for name in HEADER_TEXT_KEYS:
        value = getattr(ex, name)
        if isinstance(value, str) and (issue := sbatch_text_issue(value, f"execution.{name}")):
            yield issue
    for flag, value in ex.sbatch_extra_flags.items():
        if value is not None and not isinstance(value, bool) and (
                issue := sbatch_text_issue(str(value), f"execution.sbatch_extra_flags.{flag}")):
            yield issue
