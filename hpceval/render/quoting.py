"""Shell safety by construction: the Jinja environment that writes job scripts.

Every ``{{ expression }}`` passes through ``finalize``, which shell-quotes it. The only ways to
emit text unquoted are values already marked as :class:`ShellCode`: the ``shell_code`` filter
(used for ``execution.pre_commands`` only, which are admin-written shell by definition),
identifiers that passed a strict check (``env_name``), and fragments built in Python from
fixed text (``ShellCode("\\"$PORT\\"")``). Templates never quote by hand, so a value with
spaces, quotes, ``$()``, backticks, ``;`` or newlines stays one literal word.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Words that start a new line in a long command (the server command after its container).
_BREAK_BEFORE = {"vllm", "python3", "bash", "ray"}


class ShellCode(str):
    """Text that goes into the script verbatim. Create it only from trusted or checked text."""

    __slots__ = ()


def var(name: str) -> ShellCode:
    """A double-quoted reference to a shell variable, e.g. ``"$PORT"``."""
    return ShellCode(f'"${{{env_name(name)}}}"')


def quote(value: Any) -> str:
    """One shell word for a value; ShellCode passes through; lists become several words."""
    if isinstance(value, ShellCode):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (list, tuple)):
        return " ".join(quote(v) for v in value)
    if value is None:
        raise ValueError("a None value reached the job script; the template must test for it")
    return shlex.quote(str(value))


def argv(values: Iterable[Any]) -> ShellCode:
    """A command line: each item one word (quoted unless it is ShellCode)."""
    return ShellCode(" ".join(quote(v) for v in values))


_FLAG_PREFIX = re.compile(r"^(--[a-z][a-z-]*=)?$")


def joined(values: Iterable[Any], sep: str, prefix: str = "") -> ShellCode:
    """One shell word from several values, e.g. ``--container-mounts=A:A,B:B:ro``: each value
    quoted on its own (a ShellCode such as ``"$MODEL_DIR/x"`` stays a live reference), joined
    by a separator that bash reads literally, after an optional fixed ``--flag=``."""
    if sep not in (",", ":") or not _FLAG_PREFIX.match(prefix):
        raise ValueError(f"joined: {sep!r} / {prefix!r} is not a fixed separator and flag")
    word = prefix + sep.join(quote(v) for v in values)
    return FlagWord(word) if prefix else ShellCode(word)


def command_lines(values: Iterable[Any], indent: int = 2) -> ShellCode:
    """A long command line split before each ``--flag``, joined with backslash-newlines."""
    lines: list[list[str]] = [[]]
    for v in values:
        word = quote(v)
        plain = isinstance(v, str) and not isinstance(v, ShellCode)
        if lines[-1] and (isinstance(v, FlagWord) or (plain and (
                v.startswith("--") or v in _BREAK_BEFORE or isinstance(v, LineStart)))):
            lines.append([])
        lines[-1].append(word)
    pad = " " * indent
    return ShellCode(f" \\\n{pad}".join(" ".join(line) for line in lines))


def env_name(value: Any) -> ShellCode:
    """An environment variable name, checked so it can appear unquoted (``export NAME=``)."""
    if not isinstance(value, str) or not _NAME.match(value):
        raise ValueError(f"{value!r} is not a valid environment variable name")
    return ShellCode(value)


# A secret or host variable the job reads by NAME: the script stops with this message when it
# is missing. `hpceval resume` finds the names again in the scripts (passed_env_names).
UNSET_IN_JOB = "is not set in the job environment"
_PASSED_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*):\?" + re.escape(UNSET_IN_JOB) + r"\}")


def passed_env(name: str) -> ShellCode:
    """``"${NAME:?...}"``: the variable's value in the job, which fails loudly when unset."""
    return ShellCode(f'"${{{env_name(name)}:?{UNSET_IN_JOB}}}"')


def passed_env_names(script: str) -> list[str]:
    """The variables a rendered script reads by name (passed_env), sorted, each once."""
    return sorted(set(_PASSED_ENV.findall(script)))


def shell_code(value: Any) -> ShellCode:
    """Trusted shell, emitted verbatim. Only for execution.pre_commands (admin-written)."""
    return ShellCode(str(value))


def comment(value: Any) -> ShellCode:
    """Free text inside a comment: the template writes '# ' before it, and every further line
    gets '# ' too, so no line of the value can escape the comment."""
    lines = str(value).splitlines() or [""]
    return ShellCode("\n# ".join(lines))


class FlagWord(ShellCode):
    """A ``--flag=value`` word built by :func:`joined`; wrapped commands break before it."""

    __slots__ = ()


class LineStart(str):
    """A command-line word that starts a new line when the command is wrapped."""

    __slots__ = ()


def _finalize(value: Any) -> str:
    if isinstance(value, jinja2.Undefined):  # StrictUndefined raises before we get here
        return str(value)
    return quote(value)


@lru_cache(maxsize=1)
def shipped_environment() -> jinja2.Environment:
    """The environment of the shipped templates/, made once per process (job and sweep)."""
    from hpceval.resources import templates_dir

    return make_environment(templates_dir())


def render_template(name: str, values: dict[str, Any]) -> str:
    """One shipped template, rendered with the quoting environment (handed to backends)."""
    return shipped_environment().get_template(name).render(values)


def make_environment(template_dir: Path) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir)),
        undefined=jinja2.StrictUndefined,
        finalize=_finalize,
        autoescape=False,
        # bash's ${#array[@]} starts with Jinja's default comment marker "{#"
        comment_start_string="{#{",
        comment_end_string="}#}",
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        shell_code=shell_code, env_name=env_name, argv=argv, comment=comment, var=var,
        command_lines=command_lines, joined=joined,
    )
    return env
