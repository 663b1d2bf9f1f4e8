"""hpceval's modules parsed with ast, their imports and the package graph they make."""

from __future__ import annotations

import ast
import builtins
from collections.abc import Iterable, Iterator
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

