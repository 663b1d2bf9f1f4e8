"""The run-directory contract: the job script names its files through `files`, as Python does."""

from __future__ import annotations

import re
from pathlib import Path

from hpceval.contract import JOB_FILES

TEMPLATES = Path(__file__).parents[2] / "templates"


def test_templates_never_spell_a_contract_file_name() -> None:
    # A name in a shell command (not a comment) must come from {{ files.* }}, so renaming a
    # file in hpceval/contract.py renames it for bash too.
    spelled = re.compile(r"/\.?(" + "|".join(re.escape(n) for n in JOB_FILES.values())
                         + r")\b")
    found = [f"{path.name}:{n}: {line.strip()}"
             for path in sorted(TEMPLATES.rglob("*.j2"))
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if not line.lstrip().startswith("#") and spelled.search(line.split(" # ")[0])]
    assert found == []


def test_every_name_the_templates_use_is_in_the_contract() -> None:
    used = {m for path in TEMPLATES.rglob("*.j2")
            for m in re.findall(r"\{\{ files\.(\w+) \}\}", path.read_text(encoding="utf-8"))}
    assert used and used <= set(JOB_FILES)
