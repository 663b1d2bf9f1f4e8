"""Sizes, imports across packages, typing and exception figures of one parsed tree."""

from __future__ import annotations

import ast
import re
import statistics
from collections.abc import Callable, Iterator
from pathlib import Path

from arch_figures.tree import (
    BUILTIN_EXCEPTIONS,
    FRONT_TOPS,
    SLURM_CODE,
    Tree,
    cross_package,
    cycles,
    imports,
)


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

