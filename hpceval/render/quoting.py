"""Shell safety by construction: the Jinja environment that writes job scripts.

Every ``{{ expression }}`` passes through ``finalize``, which shell-quotes it. The only ways to
emit text unquoted are values already marked as :class:`ShellCode`: the ``shell_code`` filter
(used for ``execution.module_init`` and ``pre_commands`` only, admin-written shell by definition),
identifiers that passed a strict check (``env_name``), and fragments built in Python from
fixed text (``ShellCode("\\"$PORT\\"")``). Templates never quote by hand, so a value with
spaces, quotes, ``$()``, backticks, ``;`` or newlines stays one literal word.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

from hpceval.engines import engine_for, engine_names

# The pure word-level pieces live in hpceval.shell (below config and render); re-exported.
from hpceval.shell import (
    FlagWord as FlagWord,
)
from hpceval.shell import (
    LineStart as LineStart,
)
from hpceval.shell import (
    ShellCode as ShellCode,
)
from hpceval.shell import (
    argv as argv,
)
from hpceval.shell import (
    env_name as env_name,
)
from hpceval.shell import (
    joined as joined,
)
from hpceval.shell import (
    quote as quote,
)
from hpceval.shell import (
    var as var,
)

# Words that start a new line in a long command (the server command after its container):
# each serving engine's first word, bash (Ray's wait) and ray.
_BREAK_BEFORE = {"bash", "ray", *(w for w in (engine_for(n).command_word for n in engine_names())
                                  if w)}


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
    """Trusted shell, emitted verbatim. Only for execution.module_init and pre_commands
    (admin-written)."""
    return ShellCode(str(value))


def comment(value: Any) -> ShellCode:
    """Free text inside a comment: the template writes '# ' before it, and every further line
    gets '# ' too, so no line of the value can escape the comment."""
    lines = str(value).splitlines() or [""]
    return ShellCode("\n# ".join(lines))


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


def listening_ports_function() -> str:
    """The shell function `listening_ports` (templates/listening_ports.j2), as the job's
    preamble includes it: for a script that is not rendered (hpceval doctor's node job)."""
    return render_template("listening_ports.j2", {})


def node_address_code() -> str:
    """The code that picks the address a node's servers advertise (NCCL_SOCKET_IFNAME's
    interface, else the node's name; templates/deployment/_node_address.j2), as the step wrapper
    runs it for an instance on one node: for hpceval doctor's node job, which reports it."""
    return render_template("deployment/_node_address.j2", {"spans_nodes": False})
