"""Name tests outside the registries, docstrings and comments, other counts, duplicates."""

from __future__ import annotations

import ast
import io
import re
import shutil
import subprocess
import tempfile
import tokenize
from pathlib import Path

from arch_figures.measures import fmt, last_name, plural
from arch_figures.tree import (
    ALL_NAMES,
    BACKEND_NAMES,
    NAME_KEYS,
    PLUGIN_BASES,
    REGISTERED,
    REGISTRY_PACKAGES,
    Module,
    Tree,
    walk_scoped,
)


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

