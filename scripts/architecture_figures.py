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
not import hpceval, so the tree's own dependencies are not needed.

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
import ast
import builtins
import io
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tokenize
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ENGINE_NAMES = frozenset({"none", "vllm", "sglang", "command"})
RUNTIME_NAMES = frozenset({"apptainer", "singularity", "pyxis", "none", "docker", "podman",
                           "charliecloud"})
BACKEND_NAMES = frozenset({"slurm", "local"})
REGISTERED = {"engine": ENGINE_NAMES, "runtime": RUNTIME_NAMES, "backend": BACKEND_NAMES}
ALL_NAMES = ENGINE_NAMES | RUNTIME_NAMES | BACKEND_NAMES
NAME_KEYS = frozenset({"type", "container_runtime", "runtime", "kind", "engine", "backend"})
REGISTRY_PACKAGES = ("hpceval/engines/", "hpceval/runtimes/", "hpceval/backends/")
PLUGIN_BASES = frozenset({"Engine", "Runtime", "Backend", "ContainerRuntime"})
FRONT_TOPS = frozenset({"cli", "api"})
SKIPPED_TARGETS = frozenset({"hpceval._version"})
# The code that may name the Slurm package: backends/ and, before the Slurm code moved into
# backends/slurm/ (3025bc6: hpceval/slurm/ beside a one-module backends/slurm.py), hpceval/slurm/.
SLURM_CODE = ("hpceval/backends/", "hpceval/slurm/")
DUPLICATE_SECONDS = 120

BUILTIN_EXCEPTIONS = frozenset(
    name for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException))


@dataclass
class Module:
    """One ``.py`` file below ``hpceval/``, parsed."""

    name: str
    rel: str
    is_package: bool
    text: str
    tree: ast.Module

    @property
    def top(self) -> str:
        return top_of(self.name)

    @property
    def lines(self) -> int:
        return self.text.count("\n")


@dataclass
class Import:
    """One import statement of hpceval and the hpceval modules it names."""

    module: Module
    node: ast.Import | ast.ImportFrom
    kind: str  # "module", "lazy" or "type"
    targets: list[str]
    scope: str


@dataclass
class Tree:
    """The parsed hpceval package of one repository root."""

    root: Path
    modules: list[Module] = field(default_factory=list)

    @property
    def names(self) -> set[str]:
        return {m.name for m in self.modules}


def top_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def read_tree(root: Path) -> Tree:
    tree = Tree(root)
    for path in sorted((root / "hpceval").rglob("*.py")):
        rel = path.relative_to(root)
        parts = list(rel.with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        text = path.read_text(encoding="utf-8")
        tree.modules.append(Module(".".join(parts), rel.as_posix(), is_package, text,
                                   ast.parse(text, filename=str(path))))
    return tree


def is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def resolve(module: Module, node: ast.ImportFrom) -> str:
    """The absolute module a ``from`` import reads from."""
    if not node.level:
        return node.module or ""
    base = module.name.split(".")
    if not module.is_package:
        base = base[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_targets(module: Module, node: ast.Import | ast.ImportFrom, known: set[str]
                   ) -> list[str]:
    """The hpceval modules one statement names (``from pkg import submodule``: the submodule)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        source = resolve(module, node)
        names = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source
                 for alias in node.names]
    return [name for name in names if name == "hpceval" or name.startswith("hpceval.")]


def walk_scoped(tree: ast.Module) -> Iterator[tuple[ast.AST, str, str]]:
    """Every node with its import kind ("module", "lazy", "type") and its scope (the qualified
    name of the innermost function, or "" at a module's top level)."""
    def visit(node: ast.AST, kind: str, scope: str) -> Iterator[tuple[ast.AST, str, str]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and is_type_checking(child.test):
                yield child, kind, scope
                for stmt in child.body:
                    yield stmt, "type", scope
                    yield from visit(stmt, "type", scope)
                for stmt in child.orelse:
                    yield stmt, kind, scope
                    yield from visit(stmt, kind, scope)
                continue
            inner_kind, inner_scope = kind, scope
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                inner_kind = "type" if kind == "type" else "lazy"
                name = getattr(child, "name", "<lambda>")
                inner_scope = f"{scope}.{name}" if scope else name
            elif isinstance(child, ast.ClassDef):
                inner_scope = f"{scope}.{child.name}" if scope else child.name
            yield child, kind, scope
            yield from visit(child, inner_kind, inner_scope)
    yield from visit(tree, "module", "")


def imports(tree: Tree) -> list[Import]:
    known = tree.names
    found = []
    for module in tree.modules:
        for node, kind, scope in walk_scoped(module.tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                targets = import_targets(module, node, known)
                if targets:
                    found.append(Import(module, node, kind, targets, scope))
    return found


def cross_package(found: list[Import]) -> list[tuple[Import, set[str]]]:
    """The statements that name another top than their own, with the tops they name."""
    out = []
    for imp in found:
        tops = {top_of(t) for t in imp.targets if t not in SKIPPED_TARGETS}
        tops.discard(imp.module.top)
        if tops:
            out.append((imp, tops))
    return out


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative): the components of more than one node, sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    nodes = sorted(set(edges) | {t for ts in edges.values() for t in ts})
    counter = 0
    for start in nodes:
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(edges.get(succ, ())))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(sorted(component))
    return sorted(components)


def cycles(cross: list[tuple[Import, set[str]]], kinds: Iterable[str]) -> str:
    wanted = set(kinds)
    edges: dict[str, set[str]] = {}
    for imp, tops in cross:
        if imp.kind in wanted:
            edges.setdefault(imp.module.top, set()).update(tops)
    components = strongly_connected(edges)
    if not components:
        return "none"
    return "; ".join(f"{len(c)} ({', '.join(c)})" for c in components)


def span(node: ast.AST) -> int:
    end = getattr(node, "end_lineno", None) or 0
    return int(end) - int(getattr(node, "lineno", 0)) + 1


def fmt(number: int) -> str:
    return f"{number:,}"


def plural(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


def last_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):
        return last_name(node.value)
    if isinstance(node, ast.Call):
        return last_name(node.func)
    return ""


# ---------------------------------------------------------------------------------- figures

def sizes(root: Path, tree: Tree) -> dict[str, str]:
    lines = [m.lines for m in tree.modules]
    templates = [p for p in sorted((root / "templates").rglob("*")) if p.is_file()]
    template_lines = sum(p.read_bytes().count(b"\n") for p in templates)
    biggest = max(tree.modules, key=lambda m: m.lines)
    functions = [node for m in tree.modules for node in ast.walk(m.tree)
                 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
    classes = [(span(node), m, node) for m in tree.modules for node in ast.walk(m.tree)
               if isinstance(node, ast.ClassDef)]
    size, where, cls = max(classes, key=lambda c: c[0])
    return {
        "modules / lines in `hpceval/`":
            f"{len(lines)} / {fmt(sum(lines))}",
        "templates: files / lines": f"{len(templates)} / {fmt(template_lines)}",
        "module size: median / max / count over 400 lines":
            f"{statistics.median(lines):g} / {biggest.lines} "
            f"(`{biggest.rel.removeprefix('hpceval/')}`) / {sum(n > 400 for n in lines)}",
        "functions over 60 lines / largest class":
            f"{sum(span(f) > 60 for f in functions)} / {size} "
            f"(`{where.rel.removeprefix('hpceval/')}:{cls.lineno} {cls.name}`)",
    }


def slurm_package(tree: Tree) -> str:
    """``hpceval.backends.slurm`` where it is a package, else the older ``hpceval.slurm``."""
    if (tree.root / "hpceval" / "backends" / "slurm" / "__init__.py").is_file():
        return "hpceval.backends.slurm"
    return "hpceval.slurm"


def import_figures(tree: Tree) -> dict[str, str]:
    found = imports(tree)
    cross = cross_package(found)
    by_kind = {k: sum(imp.kind == k for imp, _ in cross) for k in ("module", "lazy", "type")}
    lazy_front = sum(imp.kind == "lazy" and imp.module.top in FRONT_TOPS for imp, _ in cross)
    package = slurm_package(tree)
    slurm = [imp for imp in found
             if not imp.module.rel.startswith(SLURM_CODE)
             and any(t == package or t.startswith(package + ".") for t in imp.targets)]
    private = [imp for imp in found
               if isinstance(imp.node, ast.ImportFrom)
               and any(a.name.startswith("_") and not a.name.startswith("__")
                       for a in imp.node.names)
               and any(t != imp.module.name for t in imp.targets)]
    return {
        "cross-package imports: module-level / lazy / TYPE_CHECKING":
            f"{by_kind['module']} / {by_kind['lazy']} / {by_kind['type']}",
        "lazy imports in `cli/`+`api` / in library code":
            f"{lazy_front} / {by_kind['lazy'] - lazy_front}",
        "packages in one SCC, lazy imports counted": cycles(cross, ("module", "lazy")),
        "… TYPE_CHECKING imports counted too": cycles(cross, ("module", "lazy", "type")),
        "Slurm package imported from outside `backends/` (statements / files)":
            f"{len(slurm)} / {len({imp.module.rel for imp in slurm})}",
        "private `_names` imported across modules": str(len(private)),
    }


def all_args(args: ast.arguments) -> list[ast.arg]:
    out = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    out += [a for a in (args.vararg, args.kwarg) if a is not None]
    return out


def annotation_nodes(tree: ast.Module) -> Iterator[ast.expr]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for arg in all_args(node.args):
                if arg.annotation is not None:
                    yield arg.annotation
            returns = getattr(node, "returns", None)
            if returns is not None:
                yield returns
        elif isinstance(node, ast.AnnAssign):
            yield node.annotation


def is_any(node: ast.expr | None) -> bool:
    if isinstance(node, ast.Constant):
        return node.value == "Any"
    return isinstance(node, (ast.Name, ast.Attribute)) and last_name(node) == "Any"


def typing_figures(tree: Tree) -> dict[str, str]:
    slurm_params = []
    returns_any = 0
    returns_any_api = 0
    dict_any = 0
    pattern = re.compile(r"\b[dD]ict\[str,Any\]")
    for module in tree.modules:
        for node in ast.walk(module.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                returns_any += is_any(node.returns)
                returns_any_api += is_any(node.returns) and module.top == "api"
                if not module.rel.startswith(SLURM_CODE):
                    slurm_params += [module.rel for arg in all_args(node.args)
                                     if arg.annotation is not None
                                     and "SlurmClient" in ast.unparse(arg.annotation)]
        for annotation in annotation_nodes(module.tree):
            text = ast.unparse(annotation).replace(" ", "").replace("'", "").replace('"', "")
            dict_any += len(pattern.findall(text))
    in_api = sum(rel.startswith("hpceval/api/") for rel in slurm_params)
    dict_lines = sum(line.count("dict[str, Any]") > 0
                     for module in tree.modules for line in module.text.splitlines())
    return {
        "`SlurmClient` parameters outside `backends/` (in `api/`)":
            f"{len(slurm_params)} ({in_api})",
        "functions returning `Any` (in the API)": f"{returns_any} ({returns_any_api})",
        "`dict[str, Any]`: source lines (occurrences in annotations)":
            f"{dict_lines} ({dict_any})",
    }


def exception_figures(tree: Tree) -> dict[str, str]:
    bases: dict[str, set[str]] = {}
    for module in tree.modules:
        for node in ast.walk(module.tree):
            if isinstance(node, ast.ClassDef):
                key = f"{module.name}.{node.name}"
                bases[key] = {last_name(b) for b in node.bases}

    def closure(seed: Callable[[str, set[str]], bool]) -> set[str]:
        chosen = {k for k, b in bases.items() if seed(k, b)}
        while True:
            names = {k.rsplit(".", 1)[1] for k in chosen}
            more = {k for k, b in bases.items() if b & names} - chosen
            if not more:
                return chosen
            chosen |= more

    exceptions = closure(lambda _, b: bool(b & BUILTIN_EXCEPTIONS))
    hpceval_error = closure(lambda k, _: k.rsplit(".", 1)[1] == "HpcevalError")
    return {"exception classes / under `HpcevalError`":
            f"{len(exceptions)} / {len(hpceval_error & exceptions)}"}


def name_test_hits(module: Module, plugin_classes: set[str]) -> list[tuple[int, str]]:
    """(line, scope) of each engine/runtime/backend name test in one module."""
    hits: list[tuple[int, str]] = []

    def constants(node: ast.expr) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return [e.value for e in node.elts
                    if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        return []

    def keyed(node: ast.expr) -> bool:
        if isinstance(node, ast.Call) and last_name(node.func) == "get" and node.args:
            first = node.args[0]
            return isinstance(first, ast.Constant) and first.value in NAME_KEYS
        if isinstance(node, ast.Subscript):
            key = node.slice
            return isinstance(key, ast.Constant) and key.value in NAME_KEYS
        return isinstance(node, (ast.Name, ast.Attribute)) and last_name(node) in NAME_KEYS

    scoped = list(walk_scoped(module.tree))
    for node, _, scope in scoped:
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(
                node.ops[0], (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
            left, right = node.left, node.comparators[0]
            for side, other in ((left, right), (right, left)):
                if set(constants(side)) & ALL_NAMES and keyed(other):
                    hits.append((node.lineno, scope))
                    break
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "isinstance" and len(node.args) == 2:
            classes = node.args[1]
            named = classes.elts if isinstance(classes, ast.Tuple) else [classes]
            if any(last_name(c) in plugin_classes for c in named):
                hits.append((node.lineno, scope))
        elif isinstance(node, ast.Call) and last_name(node.func) == "backend" \
                and node.args and constants(node.args[0]) \
                and set(constants(node.args[0])) <= BACKEND_NAMES:
            hits.append((node.lineno, scope))
    for node, _, scope in scoped:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(
                node.value, (ast.Tuple, ast.List, ast.Set)):
            names = set(constants(node.value))
            if any(len(names & registered) >= 2 for registered in REGISTERED.values()):
                hits.append((node.lineno, scope))
    return hits


def plugin_class_names(tree: Tree) -> set[str]:
    """Classes of the engines, runtimes and backends packages deriving (by name) from a plugin
    base, and the bases themselves."""
    bases: dict[str, set[str]] = {}
    for module in tree.modules:
        if module.rel.startswith(REGISTRY_PACKAGES):
            for node in ast.walk(module.tree):
                if isinstance(node, ast.ClassDef):
                    bases[node.name] = {last_name(b) for b in node.bases}
    chosen = {name for name in bases if name.endswith("Backend")} | (PLUGIN_BASES & set(bases))
    while True:
        more = {name for name, b in bases.items() if b & chosen} - chosen
        if not more:
            return chosen
        chosen |= more


def name_test_figures(tree: Tree) -> dict[str, str]:
    plugin_classes = plugin_class_names(tree)
    sites: set[tuple[str, str]] = set()
    hits = 0
    for module in tree.modules:
        if module.rel.startswith(REGISTRY_PACKAGES):
            continue
        found = name_test_hits(module, plugin_classes)
        hits += len(found)
        sites.update((module.rel, scope) for _, scope in found)
    modules = {rel for rel, _ in sites}
    return {"engine/runtime/backend name tests outside their registries":
            f"{plural(len(sites), 'site')} in {plural(len(modules), 'module')} "
            f"({plural(hits, 'hit')})"}


def docstring_lines(tree: ast.Module) -> set[int]:
    """The lines of the module's, classes' and functions' docstrings."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                and ast.get_docstring(node, clean=False) is not None:
            first = node.body[0]
            lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def docstring_figures(tree: Tree) -> dict[str, str]:
    with_doc = sum(ast.get_docstring(m.tree) is not None for m in tree.modules)
    public = documented = 0
    comments = code = 0
    for module in tree.modules:
        for node in ast.walk(module.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                    and not node.name.startswith("_"):
                public += 1
                documented += ast.get_docstring(node) is not None
        comments += sum(token.type == tokenize.COMMENT for token in
                        tokenize.generate_tokens(io.StringIO(module.text).readline))
        lines = module.text.splitlines()
        code += (len(lines) - sum(not line.strip() for line in lines)
                 - sum(line.lstrip().startswith("#") for line in lines)
                 - len(docstring_lines(module.tree)))
    n = len(tree.modules)
    return {"module docstrings / public defs with docstrings / comments per 100 code lines":
            f"{100 * with_doc / n:.0f} % / {100 * documented / max(public, 1):.0f} % / "
            f"{100 * comments / max(code, 1):.1f}"}


def other_figures(root: Path, tree: Tree) -> dict[str, str]:
    golden = root / "tests" / "golden" / "local__dp.sbatch"
    sbatch = 0
    if golden.is_file():
        sbatch = sum(line.startswith("#SBATCH")
                     for line in golden.read_text(encoding="utf-8").splitlines())
    test_files = sorted((root / "tests").rglob("test_*.py"))
    test_functions = sum(len(re.findall(r"^\s*(?:async\s+)?def test_",
                                        p.read_text(encoding="utf-8"), re.MULTILINE))
                         for p in test_files)
    test_lines = sum(p.read_bytes().count(b"\n") for p in (root / "tests").rglob("*.py"))
    registries = 0
    entry_points = False
    for module in tree.modules:
        entry_points |= "entry_points" in module.text
        registries += sum(isinstance(node, ast.Call) and last_name(node.func) == "Registry"
                          for node in ast.walk(module.tree))
    return {
        "`#SBATCH` lines in `tests/golden/local__dp.sbatch`": str(sbatch),
        "tests: files / test functions / lines":
            f"{len(test_files)} / {fmt(test_functions)} / {test_lines / 1000:.1f}k",
        "registries: `Registry(` constructions / `entry_points` used":
            f"{registries} / {'yes' if entry_points else 'no'}",
    }


def duplicate_pairs(folder: Path, min_lines: int, seconds: int) -> str:
    program = shutil.which("duplicates")
    if program is None or not folder.is_dir():
        return "n/a"
    result = subprocess.run(
        [program, "--repo", str(folder), "--min-lines", str(min_lines), "--most", "200",
         "--seconds", str(seconds)], capture_output=True, text=True, check=False)
    out = result.stdout
    first = out.splitlines()[0] if out else ""
    match = re.match(r"(\d+) pairs? ", first)
    count = match.group(1) if match else ("0" if first.startswith("no duplicates") else "?")
    if "incomplete:" in out:
        count += " (incomplete)"
    return count


def duplicate_figures(root: Path, seconds: int) -> dict[str, str]:
    with tempfile.TemporaryDirectory(prefix="figures-templates-") as scratch:
        shell = Path(scratch)
        source = root / "templates"
        for path in sorted(source.rglob("*")) if source.is_dir() else []:
            if path.is_file():
                target = shell / (path.relative_to(source).as_posix() + ".sh")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(path.read_bytes())
        templates = duplicate_pairs(shell, 4, seconds)
    package = root / "hpceval"
    return {"duplicate pairs: `hpceval/` ≥6, ≥4; templates ≥4; tests ≥6":
            f"{duplicate_pairs(package, 6, seconds)}, {duplicate_pairs(package, 4, seconds)}; "
            f"{templates}; {duplicate_pairs(root / 'tests', 6, seconds)}"}


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
