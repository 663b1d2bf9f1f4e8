"""benchmarks/ is a folder of scripts, not a package: its modules import each other by name
(they run as `python benchmarks/X.py`), so the tests put that folder on sys.path the same way."""

from __future__ import annotations

import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))
