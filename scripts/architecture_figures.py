#!/usr/bin/env python3
"""Print the architecture review's table of figures for one or more hpceval trees.

``/work/shared/reviews/architecture-3.md`` section 1 ("Figures, old vs now") measured hpceval at
``3025bc6`` and ``1ca9378``; issue 33 asks for that table again, before and after. This script
recomputes the figures that can be measured mechanically and prints them as a Markdown table,
one column per tree::

    python3 scripts/architecture_figures.py                       # the current directory
    python3 scripts/architecture_figures.py --root /tmp/old --label 1ca9378 \
        --root . --label now

An old revision is measured from a worktree (``git worktree add --detach /tmp/old REV``). The
script only reads the trees (standard library only; ``duplicates`` from PATH for the duplicate
rows, which are shown as "n/a" without it). It runs with any Python >= 3.10; the ``ast`` pass does
not import hpceval, so the tree's own dependencies are not needed. The measuring code is the
package beside this script, ``scripts/arch_figures/``.

How each figure is counted
--------------------------
A *module* is a ``.py`` file below ``hpceval/``; its *top* is the first name below ``hpceval``
(``config`` for ``hpceval/config/checks.py``, ``errors`` for ``hpceval/errors.py``,
``__init__`` for ``hpceval/__init__.py``). Lines are newline counts (``wc -l``). Everything is
read with ``ast``/``tokenize``; nothing of the tree is imported. (``grimp``, which import-linter
uses, is not needed: it does not tell lazy imports from module-level ones.)

- modules / lines: ``.py`` files below ``hpceval/`` and their lines; templates: every file below
  ``templates/`` and its lines.
- module size: the median (``statistics.median``), the largest module, modules over 400 lines.
- functions over 60 lines: ``def``/``async def`` at any depth (methods and nested functions
  too) whose ``end_lineno - lineno + 1`` (decorators not counted) is over 60. Largest class: the
  same span for ``class`` statements, with its first line.
- cross-package imports: ``import``/``from ... import`` statements (relative ones resolved;
  ``from pkg import submodule`` names the submodule) in a module of one top that name a module
  of another top, one per statement. Imports of ``hpceval._version`` do not count: the review
  leaves them out (they are the difference between its 131 and the older review's 138 at
  ``3025bc6``). A statement is *TYPE_CHECKING* when it stands under ``if TYPE_CHECKING:``
  (anywhere), else *lazy* when it stands inside a function, else module-level. "Lazy imports in
  cli/+api / library code" splits the lazy ones by the importing top.
- packages in one SCC: a graph of tops with an arrow for each cross-package import; Tarjan's
  strongly connected components, listing those of more than one top ("size (members)"). First
  with module-level + lazy arrows, then with the TYPE_CHECKING arrows too.
- Slurm package imported from outside the backends: statements (module-level, lazy and
  TYPE_CHECKING) outside ``hpceval/backends/`` naming the Slurm package or a module below it,
  and the files holding them. The Slurm package is ``hpceval.backends.slurm`` where that is a
  package; before the move (``3025bc6``) it was ``hpceval.slurm`` (beside a one-module
  ``backends/slurm.py`` adapter), and ``hpceval/slurm/`` then counts as inside too.
- ``SlurmClient`` parameters: function parameters (positional, keyword-only, ``*args``,
  ``**kwargs``) whose annotation text contains ``SlurmClient``, outside ``hpceval/backends/``
  (and the old ``hpceval/slurm/``): the review's 38 at ``1ca9378`` leaves out
  ``backends/__init__.py:backend_for`` as well as ``backends/slurm/``. "(in api/)": the part in
  the ``api`` top.
- ``#SBATCH`` lines: lines of ``tests/golden/local__dp.sbatch`` that start with ``#SBATCH``
  (directives; a comment naming ``#SBATCH`` is not one).
- name tests outside the registries, in modules outside ``hpceval/{engines,runtimes,backends}``.
  A *hit* is one of:
  (1) a comparison (``==``, ``!=``, ``in``, ``not in``, not chained) with one side a
  registered-name string constant, or a tuple/list/set of constants holding one, and the other
  a name, attribute, ``.get(KEY)`` call or ``[KEY]`` subscript named or keyed ``type``,
  ``container_runtime``, ``runtime``, ``kind``, ``engine`` or ``backend``;
  (2) ``isinstance(x, C)`` with ``C`` (or one of a tuple) an engine/runtime/backend class: the
  classes of ``hpceval/{engines,runtimes,backends}`` named ``*Backend`` or ``Engine``,
  ``Runtime``, ``ContainerRuntime``, and those deriving from them by name;
  (3) a tuple/list/set literal assigned to a name and holding two or more registered names of
  one kind (``PROGRAMS = ("apptainer", "singularity", "enroot", "podman")``); a literal that is
  a call's argument (``click.Choice([...])``) or a ``Literal[...]`` type is not a hit;
  (4) a call of a function or method named ``backend`` whose argument is a registered backend
  name (``self.backend("slurm")``).
  Registered names: engines ``none vllm sglang command``; runtimes ``apptainer singularity pyxis
  none docker podman charliecloud``; backends ``slurm local``. The review counts *sites*: the
  hits in one function (or at one module's top level) are one site. Shown as "N sites in M
  modules (H hits)".
- exception classes: classes whose bases (by their last dotted name) include a builtin exception
  or, transitively, another exception class of hpceval. "Under HpcevalError": ``HpcevalError``
  itself and the classes deriving from it, transitively by name.
- functions returning ``Any``: ``def``/``async def`` whose return annotation is exactly ``Any``
  (``typing.Any`` or the string ``"Any"`` too); "(in the API)": the part in the ``api`` top.
- ``dict[str, Any]``: source lines of ``hpceval/`` holding that text (``grep -c``; docstrings
  and comments included). That is what the review counted (217 at ``3025bc6``, 230 at
  ``1ca9378``); in parentheses the occurrences in annotations proper (``ast.unparse`` of every
  parameter, return and annotated-assignment annotation, ``Dict[str, Any]`` too).
- private names across modules: ``from hpceval.x import _y`` statements (relative ones resolved;
  dunders are not private) importing at least one ``_name`` from another module.
- duplicate pairs: the pair count in the first line of ``duplicates --repo DIR --min-lines N
  --most 200 --seconds S`` for ``hpceval/`` (6 and 4 lines), ``templates/`` (4) and ``tests/``
  (6). ``duplicates`` reads only source files, so the templates are copied to a scratch folder
  with ``.sh`` appended to each name (the review read them as shell). In a git checkout
  ``duplicates`` reads the tracked files and the untracked ones git does not ignore, as they
  are in the working tree: measure a revision from a clean worktree. "(incomplete)" marks a
  count that ``duplicates`` reported as cut short (raise ``--seconds``).
- module docstrings: modules with a module docstring, in %. Public defs with docstrings:
  ``def``/``async def``/``class`` at any depth whose name does not start with ``_``, in %.
  Comments per 100 code lines: ``COMMENT`` tokens (inline ones too) per 100 code lines, where
  code lines are all lines less blank lines, lines whose text starts with ``#`` and the lines of
  module, class and function docstrings.
- tests: ``tests/**/test_*.py`` files; lines matching ``def test_`` (``async def`` too) in those
  files (a parametrized test counts once); lines of every ``.py`` file below ``tests/``.
- registries: calls of ``Registry`` (a name or attribute, ``Registry[T](...)`` included) in
  hpceval, and whether any hpceval source names ``entry_points`` (``importlib.metadata``
  plugin discovery).

Checked against the review's table: the ``1ca9378`` column reproduces every figure of the
review's "now" column that this script measures, and the ``3025bc6`` column its "old" column,
except: (a) ``#SBATCH`` lines, 8 here, 9 in the review (``grep -c SBATCH`` there also counts the
comment ``# 300 s before the walltime (#SBATCH --signal) ...`` at line 80 of that script);
(b) name tests, 35 sites in 18 modules (56 hits) here, "36 in 11 modules" in the review: at
``3025bc6`` there were no ``engines/`` and ``runtimes/`` packages to stand outside of, and the
older review's way of counting is not written down.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from arch_figures.measures import exception_figures, import_figures, sizes, typing_figures
from arch_figures.names import (
    docstring_figures,
    duplicate_figures,
    name_test_figures,
    other_figures,
)
from arch_figures.tree import DUPLICATE_SECONDS, read_tree

ORDER = [
    "modules / lines in `hpceval/`",
    "templates: files / lines",
    "module size: median / max / count over 400 lines",
    "functions over 60 lines / largest class",
    "cross-package imports: module-level / lazy / TYPE_CHECKING",
    "lazy imports in `cli/`+`api` / in library code",
    "packages in one SCC, lazy imports counted",
    "… TYPE_CHECKING imports counted too",
    "Slurm package imported from outside `backends/` (statements / files)",
    "`SlurmClient` parameters outside `backends/` (in `api/`)",
    "`#SBATCH` lines in `tests/golden/local__dp.sbatch`",
    "engine/runtime/backend name tests outside their registries",
    "exception classes / under `HpcevalError`",
    "functions returning `Any` (in the API)",
    "`dict[str, Any]`: source lines (occurrences in annotations)",
    "private `_names` imported across modules",
    "duplicate pairs: `hpceval/` ≥6, ≥4; templates ≥4; tests ≥6",
    "module docstrings / public defs with docstrings / comments per 100 code lines",
    "tests: files / test functions / lines",
    "registries: `Registry(` constructions / `entry_points` used",
]


def figures(root: Path, seconds: int, with_duplicates: bool) -> dict[str, str]:
    tree = read_tree(root)
    out: dict[str, str] = {}
    out.update(sizes(root, tree))
    out.update(import_figures(tree))
    out.update(typing_figures(tree))
    out.update(exception_figures(tree))
    out.update(name_test_figures(tree))
    out.update(docstring_figures(tree))
    out.update(other_figures(root, tree))
    if with_duplicates:
        out.update(duplicate_figures(root, seconds))
    return out


def table(labels: list[str], columns: list[dict[str, str]]) -> str:
    rows = ["| figure | " + " | ".join(labels) + " |",
            "|---|" + "---|" * len(labels)]
    for key in ORDER:
        if any(key in column for column in columns):
            cells = [column.get(key, "") for column in columns]
            rows.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Print the architecture review's figures for hpceval trees as a Markdown "
                    "table (one column per --root).")
    parser.add_argument("--root", action="append", type=Path,
                        help="a repository root (repeatable; default: the current directory)")
    parser.add_argument("--label", action="append",
                        help="a column heading, one per --root (default: the root's path)")
    parser.add_argument("--seconds", type=int, default=DUPLICATE_SECONDS,
                        help="the bound passed to each `duplicates` call (default: %(default)s)")
    parser.add_argument("--no-duplicates", action="store_true",
                        help="skip the duplicate-pair row (no `duplicates` calls)")
    args = parser.parse_args(argv)
    roots: list[Path] = args.root or [Path.cwd()]
    labels: list[str] = args.label or []
    if len(labels) > len(roots):
        parser.error("more --label than --root")
    labels += [str(root) for root in roots[len(labels):]]
    for root in roots:
        if not (root / "hpceval").is_dir():
            parser.error(f"{root} has no hpceval/ folder")
    started = time.monotonic()
    columns = [figures(root.resolve(), args.seconds, not args.no_duplicates) for root in roots]
    print(table(labels, columns))
    print(f"\n({len(roots)} tree(s) measured in {time.monotonic() - started:.1f} s)",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
