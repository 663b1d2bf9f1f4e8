"""The words of a job script as data: text marked as shell code, quoting, and joined words.

Pure and dependency-free (no Jinja, nothing of hpceval), so the serving engines and container
runtimes, which build command lines, sit below config and render; ``render.quoting`` builds the
template environment on top of these and re-exports them.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from typing import Any

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# An upper-case word, as an environment variable's NAME is written: an env value of that form
# without a prefix is most likely a variable's name, not text (config checks, NeMo forms).
BARE_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")


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


def env_name(value: Any) -> ShellCode:
    """An environment variable name, checked so it can appear unquoted (``export NAME=``)."""
    if not isinstance(value, str) or not _NAME.match(value):
        raise ValueError(f"{value!r} is not a valid environment variable name")
    return ShellCode(value)


class FlagWord(ShellCode):
    """A ``--flag=value`` word built by :func:`joined`; wrapped commands break before it."""

    __slots__ = ()


class LineStart(str):
    """A command-line word that starts a new line when the command is wrapped."""

    __slots__ = ()
