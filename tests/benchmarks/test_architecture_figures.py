"""scripts/architecture_figures.py (issue 33's before-and-after table) runs from its package
(scripts/arch_figures/) and counts this tree as it is: its module and line figures are those of
the files themselves."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_figures_count_this_tree() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "architecture_figures.py"),
                          "--no-duplicates", "--root", str(ROOT), "--label", "now"],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    cells = ([cell.strip() for cell in line.strip().strip("|").split("|")]
             for line in out.splitlines())
    rows = {row[0]: row[1] for row in cells if len(row) == 2}
    modules = sorted((ROOT / "hpceval").rglob("*.py"))
    lines = sum(path.read_text(encoding="utf-8").count("\n") for path in modules)
    assert rows["modules / lines in `hpceval/`"] == f"{len(modules)} / {lines:,}", rows
    over = [path for path in modules if path.read_text(encoding="utf-8").count("\n") > 400]
    assert rows["module size: median / max / count over 400 lines"].endswith(
        f" / {len(over)}"), rows
