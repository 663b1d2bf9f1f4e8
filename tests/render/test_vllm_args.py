"""scripts/check-vllm-args.py: command-line extraction here; vLLM's parser where it is installed.

The parser check needs vLLM: HPCEVAL_VLLM_PYTHON names a Python that has the pinned version, e.g.
.venv-vllm/bin/python after `bash scripts/vllm/install.sh` (the CPU build, the same one the
dev cluster serves with). Without it the check skips; with HPCEVAL_REQUIRE_VLLM=1 it fails.
"""

from __future__ import annotations

import importlib.util
import json
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
    # judges (docs/judge.md): their `vllm serve` lines are checked with the model's
    slice_lines = found["slurm__judge-slice.sbatch"]
    assert [a[a.index("--served-model-name") + 1] for a in slice_lines] == [
        "llama-3.1-8b"] * 3 + ["qwen-judge"]
    assert slice_lines[-1][slice_lines[-1].index("--max-model-len") + 1] == "8192"
    assert len(found["slurm__judge-own-node.sbatch"]) == 3  # the model's 1, the judge's 2


def vllm_python() -> str:
    python = os.environ.get("HPCEVAL_VLLM_PYTHON")
    if not python:
        message = f"set HPCEVAL_VLLM_PYTHON to a Python with vllm=={VLLM_VERSION} installed"
        if os.environ.get("HPCEVAL_REQUIRE_VLLM") == "1":
            pytest.fail(f"HPCEVAL_REQUIRE_VLLM=1 but HPCEVAL_VLLM_PYTHON is unset: {message}")
        pytest.skip(message)
    assert python
    return python


def run_check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([vllm_python(), str(SCRIPT), *args], capture_output=True, text=True,
                          env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"}, check=False,
                          timeout=600)


def test_goldens_pass_vllms_own_parser(tmp_path: Path) -> None:
    # One vLLM import for both: the goldens, plus lines the parser must refuse, so a check that
    # accepted everything (a wrong module, a swallowed error) fails here.
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([["vllm", "serve", "/m", "--tensor-paralel-size", "2"],
                               ["vllm", "serve", "/m", "--dtype", "float17"]]))
    proc = run_check(*map(str, sorted(GOLDEN.glob("*.sbatch"))), "--json", str(bad))
    out = proc.stdout
    assert "note: vLLM" not in out, out  # the installed version is the pinned one
    failed = [line for line in out.splitlines() if line.startswith("FAIL")]
    assert [line.split(":")[0] for line in failed] == ["FAIL bad.json#1", "FAIL bad.json#2"], out
    assert "unrecognized arguments" in out and "invalid choice" in out, out
    assert proc.returncode == 1, proc.stderr
