"""Shell safety by construction: the Jinja environment that writes job scripts.

Every ``{{ expression }}`` passes through ``finalize``, which shell-quotes it. The only ways to
emit text unquoted are values already marked as :class:`ShellCode`: the ``shell_code`` filter
(used for ``execution.module_init`` and ``pre_commands`` only, admin-written shell by definition),
identifiers that passed a strict check (``env_name``), and fragments built in Python from
fixed text (``ShellCode("\\"$PORT\\"")``). Templates never quote by hand, so a value with
spaces, quotes, ``$()``, backticks, ``;`` or newlines stays one literal word.
"""

from __future__ import annotations

import importlib.resources
import re
from collections.abc import Callable, Iterable
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
from jinja2.loaders import split_template_path

if TYPE_CHECKING:  # importlib.resources.abc from 3.11 on; this one is 3.10's (as a type only)
    from importlib.abc import Traversable

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


# A backend's in-job partials (Backend.partials) are a folder of templates/ ("backends/slurm"),
# or, for a backend of another distribution, "package:folder": a folder that package ships
# (hpceval_memory_backend:partials). The templates include "<partials>/env.j2" either way, so
# the one seam is the loader below: names with a ":" are looked up in that package's folder.


def partials_folder(partials: str) -> Traversable:
    """The folder a backend's ``partials`` name points at: under templates/, or inside the
    package a "package:folder" name gives (what the tests list to check its files)."""
    from hpceval.resources import templates_dir

    package, sep, folder = partials.partition(":")
    if not sep:
        return templates_dir().joinpath(*split_template_path(partials))
    return importlib.resources.files(package).joinpath(*split_template_path(folder))


class ShippedPartials(jinja2.BaseLoader):
    """Loads "package:folder/name.j2" from the folder that package ships, so a scheduler of
    another distribution brings its in-job dialect along without a file in templates/. Only
    a backend's own class names such a package (Backend.partials), never a config; the path
    below it is split as Jinja's FileSystemLoader splits one (no "..")."""

    def get_source(self, environment: jinja2.Environment, template: str
                   ) -> tuple[str, str | None, Callable[[], bool] | None]:
        package, sep, rest = template.partition(":")
        if not sep or not all(part.isidentifier() for part in package.split(".")):
            raise jinja2.TemplateNotFound(template)
        try:
            found = importlib.resources.files(package).joinpath(*split_template_path(rest))
        except (ModuleNotFoundError, TypeError) as exc:  # none, or a module (not a package)
            raise jinja2.TemplateNotFound(template) from exc
        if not found.is_file():
            raise jinja2.TemplateNotFound(template)
        return found.read_text(encoding="utf-8"), str(found), lambda: True


def make_environment(template_dir: Path) -> jinja2.Environment:
    env = jinja2.Environment(
        # templates/ first: the shipped templates and the built-in backends' partials render
        # as they always have; "package:folder/..." names only resolve in the second loader
        loader=jinja2.ChoiceLoader([jinja2.FileSystemLoader(str(template_dir)),
                                    ShippedPartials()]),
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
