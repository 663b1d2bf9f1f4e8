"""No module outside a registry decides by a registered name: the Python code is parsed (not
grepped), so a test by name is found whatever its spelling: ``dep.type == "vllm"``,
``x.get("type") in ("vllm", "sglang")``, ``"local" != kind``, ``isinstance(e, Vllm)``, or a table
keyed by names; a comment or a message that names an engine is not one. Templates are Jinja, not
Python: tests/engines/test_registries.py reads them by pattern."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

from hpceval.backends import BACKENDS
from hpceval.engines import ENGINES
from hpceval.runtimes import RUNTIMES

ROOT = Path(__file__).parents[2]
# the packages that own the names: each decides by its own entries' declarations
OWNERS = {"engines", "runtimes", "backends"}
NAMES = {*ENGINES.names(), *RUNTIMES.names(), *BACKENDS.names()}
CLASSES = ({type(e).__name__ for e in ENGINES.values()}
           | {type(r).__name__ for r in RUNTIMES.values()}
           # a backend's entry is its class's factory (a classmethod bound to the class)
           | {getattr(make, "__self__", make).__name__ for make in BACKENDS.values()})
# registered names that are also words of records (a task manifest's "command" and "slurm")
RECORD_KEYS = {"none", "command"}
# what a registered name is the value of
SELECTORS = {"type", "container_runtime", "runtime", "kind", "engine", "backend"}


def _selects(node: ast.AST) -> bool:
    """``x.type``, ``type``, ``x.get("type")``, ``x["type"]``: something holding a name."""
    if isinstance(node, ast.Attribute):
        return node.attr in SELECTORS
    if isinstance(node, ast.Name):
        return node.id in SELECTORS
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr == "get" and node.args:
        return _constant(node.args[0]) in SELECTORS
    if isinstance(node, ast.Subscript):
        return _constant(node.slice) in SELECTORS
    return False


def _constant(node: ast.AST) -> object:
    return node.value if isinstance(node, ast.Constant) else None


def _names(node: ast.AST) -> bool:
    """A registered name, or a tuple, list or set holding one."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names(e) for e in node.elts)
    value = _constant(node)
    return isinstance(value, str) and value in NAMES


def name_sites(source: str) -> list[str]:
    """Every decision by a registered name in ``source``, as its code."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any((_selects(a) and _names(b)) or (_names(a) and _selects(b))
                   for a, b in itertools.pairwise(sides)):
                found.append(ast.unparse(node))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "isinstance" and len(node.args) == 2:
            kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
            if any(isinstance(k, (ast.Name, ast.Attribute)) and
                   (k.id if isinstance(k, ast.Name) else k.attr) in CLASSES for k in kinds):
                found.append(ast.unparse(node))
        elif isinstance(node, ast.Dict):  # a table keyed by names: a rule per entry, outside it
            keys = {_constant(k) for k in node.keys if k is not None and _names(k)}
            if len(keys - RECORD_KEYS) >= 2:
                found.append(ast.unparse(node)[:120])
    return found


def test_no_module_decides_by_a_registered_name() -> None:
    found = []
    for path in sorted((ROOT / "hpceval").rglob("*.py")):
        relative = path.relative_to(ROOT)
        if OWNERS & set(relative.parts) or relative.name == "registry.py":
            continue
        found += [f"{relative}: {site}" for site in name_sites(path.read_text(encoding="utf-8"))]
    assert found == []


def test_the_parser_finds_each_form() -> None:
    for code in ['dep.type == "vllm"', 'x.get("type") in ("vllm", "sglang")', '"local" != kind',
                 'ex["container_runtime"] == "pyxis"', "isinstance(engine, Vllm)",
                 "isinstance(b, (int, backends.LocalBackend))",
                 'RULES = {"apptainer": 1, "pyxis": 2}']:
        assert name_sites(code), code
    for code in ['# if dep.type == "vllm"', 'log("vllm failed")', 'dep.runtime == "host"',
                 'x.get("format") == "local"', 'DEST = {"local": 1, "mlflow": 2}',
                 "isinstance(x, dict)"]:
        assert not name_sites(code), code
