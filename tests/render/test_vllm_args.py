"""scripts/check-vllm-args.py: command-line extraction here; vLLM's parser where it is installed.

The parser check needs vLLM (9.4 GB). Point HPCEVAL_VLLM_PYTHON at a Python that has it, e.g.
/tmp/venv-vllm/bin/python after `pip install vllm==0.33.0`; otherwise that test is skipped.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

from hpceval.render import VLLM_VERSION

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check-vllm-args.py"
GOLDEN = ROOT / "tests" / "golden"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_vllm_args", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_script_pins_the_same_vllm_version() -> None:
    assert load_script().PINNED == VLLM_VERSION


def test_every_vllm_golden_has_its_serve_lines_found() -> None:
    check = load_script()
    found = {p.name: check.serve_argvs(p.read_text()) for p in GOLDEN.glob("*.sbatch")}
    assert len(found["slurm__dp.sbatch"]) == 4  # 2 nodes x 8 GPUs with TP=4: 4 instances
    multinode = found["slurm__multinode.sbatch"]
    assert [a.count("--headless") for a in multinode] == [0, 1]
    assert multinode[0][0] == "/models/Llama-3.1-8B-Instruct"
    assert "--port" in multinode[0] and multinode[0][multinode[0].index("--port") + 1] == "8000"
    assert found["slurm__external.sbatch"] == [] and found["slurm__sglang.sbatch"] == []


@pytest.mark.skipif(not os.environ.get("HPCEVAL_VLLM_PYTHON"),
                    reason="set HPCEVAL_VLLM_PYTHON to a Python with vllm==0.33.0 installed")
def test_goldens_pass_vllms_own_parser() -> None:
    python = os.environ["HPCEVAL_VLLM_PYTHON"]
    proc = subprocess.run([python, str(SCRIPT), *map(str, sorted(GOLDEN.glob("*.sbatch")))],
                          capture_output=True, text=True, env={**os.environ,
                                                               "VLLM_TARGET_DEVICE": "cpu"},
                          check=False, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FAIL" not in proc.stdout
