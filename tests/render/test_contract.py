"""The run-directory contract: one module names the tree, Python and the job scripts use it.

hpceval/contract.py names every file and folder of a run directory; the templates get them as
`files` (``{{ files.done }}``) and Python through its constants and path functions. These tests
refuse a template or a Python module that spells one of those names itself, so renaming a file
or a folder there renames it for bash and for every reader.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from hpceval import contract
from hpceval.contract import JOB_FILES

ROOT = Path(__file__).parents[2]
TEMPLATES = ROOT / "templates"
PACKAGE = ROOT / "hpceval"

# Folders of the tree: a path segment of these names is the tree's (a config key "models" or
# a JSON field "tasks" is not a path, and is not looked at).
FOLDERS = {contract.MODELS_DIR, contract.TASKS_DIR, contract.AUX_DIR, contract.SERVER_DIR,
           contract.EXPORT_DIR}
# Every file name of the contract with a dot or a slash in it: unambiguous wherever it appears.
FILE_NAMES = {v for k, v in vars(contract).items()
              if k.isupper() and isinstance(v, str) and ("." in v or "/" in v)
              and k not in {"TASK_ROUTE"}}


def _code(line: str) -> str:
    """A template line without its shell comment (the text may name files for the reader)."""
    return "" if line.lstrip().startswith(("#", "{#")) else line.split(" # ")[0]


def _template_lines() -> list[tuple[str, int, str]]:
    return [(path.name, n, _code(line)) for path in sorted(TEMPLATES.rglob("*.j2"))
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)]


def test_templates_never_spell_a_contract_file_name() -> None:
    # A name joined to a path in a shell command must come from {{ files.* }}. Only a name
    # after a shell variable or a rendered value counts as a path: /v1/models is an API route.
    names = sorted({*JOB_FILES.values(), *FILE_NAMES} - {contract.TASK_ROUTE}, key=len,
                   reverse=True)
    spelled = re.compile(r"(\$\w+|\$\{[^}]*\}|\}\}|\")/\.?(" + "|".join(map(re.escape, names))
                         + r")(?![\w.-])")
    found = [f"{name}:{n}: {line.strip()}" for name, n, line in _template_lines()
             if spelled.search(line)]
    assert found == []


def test_the_check_sees_a_spelled_name() -> None:
    # the pattern above, against lines it must refuse and lines it must let through
    names = "|".join(re.escape(n) for n in (contract.MODELS_DIR, contract.HARNESS_LOG))
    spelled = re.compile(r"(\$\w+|\$\{[^}]*\}|\}\}|\")/\.?(" + names + r")(?![\w.-])")
    assert spelled.search('MODEL_DIR="$RUN_DIR/models/$MODEL_KEY"')
    assert spelled.search('> "${TASK_DIRS[1]}/harness.log"')
    assert not spelled.search('answers "${URL}" /v1/models')
    assert not spelled.search('MODEL_DIR="$RUN_DIR/{{ files.models_dir }}/$MODEL_KEY"')


def test_every_name_the_templates_use_is_in_the_contract() -> None:
    used = {m for path in TEMPLATES.rglob("*.j2")
            for m in re.findall(r"\{\{ files\.(\w+) \}\}", path.read_text(encoding="utf-8"))}
    assert used and used <= set(JOB_FILES)
    # and the tree's folders and logs do reach them from there
    assert {"models_dir", "tasks_dir", "server_dir", "cache_dir", "harness_log", "proxy_log",
            "element_script", "log_dir"} <= used


def _tree_literals(source: str, label: str) -> list[str]:
    """Where a module spells the tree: a contract file name as a string, a folder name joined
    into a path (``/ "models"``, ``os.path.join(.., "tasks")``, ``Path(.., "models")``), or
    an f-string or string with ``models/`` or ``/tasks/`` in it."""
    tree = ast.parse(source)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef
                                | ast.AsyncFunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    segment = re.compile(r"(^|/)(" + "|".join(sorted(FOLDERS)) + r")/")
    # a file name as the last segment of a path (f"{run_dir}/job.sbatch"), not inside a
    # longer name ("job.sbatch.j2", the template's, or "doctor-job.sh")
    named = re.compile(r"/(" + "|".join(map(re.escape, sorted(FILE_NAMES, key=len,
                                                                 reverse=True)))
                       + r")(?![\w.-])")
    out: list[str] = []

    def folder(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and node.value in FOLDERS

    for node in ast.walk(tree):
        where = f"{label}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docstrings:
            if node.value in FILE_NAMES or segment.search(node.value) \
                    or named.search(node.value):
                out.append(f"{where}: {node.value!r}")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) \
                and (folder(node.left) or folder(node.right)):
            out.append(f"{where}: a folder joined with /")
        elif isinstance(node, ast.Call) and any(folder(a) for a in node.args):
            func = ast.unparse(node.func)
            if func.endswith(("join", "Path", "joinpath")):
                out.append(f"{where}: {func}(.., folder)")
    return out


# the package's own tasks/ folder (the task catalogue it ships), not a run directory's
NOT_THE_TREE = {"hpceval/resources.py", "hpceval/tasks/loader.py"}


def test_python_builds_run_directory_paths_only_through_the_contract() -> None:
    found = [hit for path in sorted(PACKAGE.rglob("*.py"))
             if path.name != "contract.py" and str(path.relative_to(ROOT)) not in NOT_THE_TREE
             for hit in _tree_literals(path.read_text(encoding="utf-8"),
                                       str(path.relative_to(ROOT)))]
    assert found == []


def test_the_python_check_sees_a_spelled_path() -> None:
    sample = ('"""models/<key>/ in a docstring is fine."""\n'
              'import os\nfrom pathlib import Path\n'
              'a = Path("r") / "models" / "k"\n'
              'b = os.path.join("r", "tasks", "t")\n'
              'c = f"{1}/models/{2}"\n'
              'd = "run.json"\n'
              'e = {"models": [], "tasks": 1}\n'
              'f = f"{e}/job.sbatch"\n'
              'g = "job.sbatch.j2", "doctor-job.sh", "a/harness.log.1"\n')
    assert sorted(int(h.split(":")[1]) for h in _tree_literals(sample, "s")) == [4, 5, 6, 7, 9]


def test_every_tree_name_of_the_contract_reaches_the_templates_or_is_python_only() -> None:
    # a new name in contract.py is either handed to the job scripts (JOB_FILES) or read and
    # written by Python alone: this list says which, so none is forgotten
    python_only = {"RUN_FILE", "JOB_SCRIPT", "SWEEP_SCRIPT", "AGGREGATE_SCRIPT", "EXPORT_SCRIPT",
                   "PULL_SCRIPT", "LOCAL_RUNNER", "JOBS_FILE", "EXPORT_WAITED_FILE",
                   "AGGREGATE_WAITED_FILE",
                   "FAILED_FILE", "MANIFEST_FILE", "AUX_JOB_SCRIPT", "LOCAL_RUNNER_LOG",
                   "CONFIG_FILE", "EXPORT_DIR", "WATCH_DIR_PREFIX", "WATCH_FILE",
                   "WATCH_STATE_FILE", "WATCH_LOCK_FILE", "WATCH_SCRIPT", "WATCH_LOG_DIR",
                   "COMPILE_CACHE_DIR"}  # rendered into a server's environment by Python
    names = {k for k, v in vars(contract).items() if k.isupper() and isinstance(v, str)}
    handed = {k for k in names if getattr(contract, k) in JOB_FILES.values()}
    assert names - handed - python_only == set()
    assert python_only <= names  # no stale entry in the list above
