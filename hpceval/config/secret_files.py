"""Secrets read from files (hpc-admin-2 N14): an env value ``file:PATH`` in any ``env_vars``.

A key passed by NAME comes from the submitting shell's environment, and whatever the submit
exports is kept in the scheduler's job state (and in its accounting database where a site
stores job environments), then in every successor's. A ``file:`` value keeps it out of
there: the job itself reads the file's first line on the node, into a shell variable of its own
(``HPCEVAL_SECRET_<digest>``, never exported), and only the processes the value is for get it,
as ``NAME``. The file must belong to the user and be closed to everyone else (0600 or 0400):
checked here when the run is submitted, and again by the job on the file it opened.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator

from hpceval.config.errors import ConfigIssue
from hpceval.config.schema import RunSpec
from hpceval.trust import stat_problem

FILE_PREFIX = "file:"


def secret_file(value: str) -> str | None:
    """The file an env value reads its secret from (``file:PATH``, ``~`` expanded), or None."""
    if not value.startswith(FILE_PREFIX):
        return None
    return os.path.expanduser(value[len(FILE_PREFIX):])


def secret_var(path: str) -> str:
    """The job's own shell variable holding PATH's secret: named by a digest of the path, so
    the same file is read once however many env_vars name it."""
    return "HPCEVAL_SECRET_" + hashlib.sha256(path.encode()).hexdigest()[:12].upper()


def from_file(spec: RunSpec, name: str) -> bool:
    """Whether the job itself reads variable NAME from a secret file (execution.env_vars NAME:
    file:PATH): the submitting shell need not hold it, and nothing passes it on by name."""
    return secret_file(spec.execution.env_vars.get(name, "")) is not None


def env_groups(spec: RunSpec) -> Iterator[tuple[str, dict[str, str]]]:
    """Every env_vars map of a run, with its key path."""
    yield "execution.env_vars", spec.execution.env_vars
    yield "deployment.env_vars", spec.deployment.env_vars
    for name, aux in spec.auxiliary_deployments.items():
        yield f"auxiliary_deployments.{name}.env_vars", aux.env_vars
    yield "evaluation.env_vars", spec.evaluation.env_vars
    for task in spec.evaluation.tasks:
        yield f"evaluation.tasks.{task.name}.env_vars", task.env_vars


def secret_files(spec: RunSpec) -> list[str]:
    """The files the run's jobs read secrets from, each once, in a stable order."""
    return sorted({path for _, env in env_groups(spec) for value in env.values()
                   if (path := secret_file(value)) is not None})


def secret_file_issues(spec: RunSpec) -> list[ConfigIssue]:
    """Each ``file:`` value whose file is not absolute, not a regular file of this user's, or
    open to the group or others (on the submitting machine, which sees the user's files)."""
    issues: list[ConfigIssue] = []
    for where, env in env_groups(spec):
        for var, value in env.items():
            path = secret_file(value)
            if path is not None:
                problem = _file_problem(path)
                if problem is not None:
                    issues.append(ConfigIssue(f"{where}.{var}", *problem))
    return issues


def _file_problem(path: str) -> tuple[str, str] | None:
    if not os.path.isabs(path):
        return (f"file:{path} is not an absolute path",
                "write file:/full/path or file:~/path (the job runs elsewhere)")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        return (f"file:{path} cannot be opened ({exc.strerror})",
                "write the secret into that file (chmod 600), or fix the path")
    try:
        info = os.fstat(fd)  # the file opened, not whatever the path names later
    finally:
        os.close(fd)
    problem = stat_problem(info, private=True, plain=True)  # the one trust rule
    if problem is None:
        return None
    return f"file:{path} {problem}", f"keep the secret in a file of your own: chmod 600 {path}"
