"""NeMo Evaluator compatibility is one hook (hpceval.config.translation): composing hpceval's own
files through it or through NATIVE (no other tool's forms) gives the same config, and a
launcher file read through NATIVE is not translated, so dropping the compat package changes
only what foreign files mean."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from hpceval.config.compose import compose
from hpceval.config.errors import ConfigError
from hpceval.config.translation import NATIVE, TRANSLATION

ROOT = Path(__file__).parents[2]

NATIVE_RUN = {
    "defaults": [{"execution": "local-dev"}, {"deployment": "vllm"}],
    "execution": {"output_dir": "/tmp/runs", "nodes": 1},
    "deployment": {"checkpoint_path": "/models/m", "served_model_name": "m",
                   "tensor_parallel_size": 2},
    "evaluation": {"tasks": [{"name": "gsm8k", "params": {"limit_samples": 5}}]},
}


def _write(tmp_path: Path, data: dict[str, object]) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_native_files_compose_the_same_through_either_hook(tmp_path: Path) -> None:
    run = _write(tmp_path, NATIVE_RUN)
    overrides = ["execution.walltime=01:00:00", "evaluation.tasks.gsm8k.params.temperature=0"]
    with_nemo = compose(run, overrides, translation=TRANSLATION)
    native = compose(run, overrides, translation=NATIVE)
    assert native.data == with_nemo.data
    assert native.sources == with_nemo.sources
    assert native.translation is NATIVE and with_nemo.translation is TRANSLATION


def test_a_launcher_file_is_translated_only_by_the_nemo_hook(tmp_path: Path) -> None:
    run = _write(tmp_path, {**NATIVE_RUN, "execution": {"output_dir": "/tmp/runs",
                                                        "num_nodes": 2}})
    translated = compose(run, [], translation=TRANSLATION)
    assert translated.data["execution"]["nodes"] == 2  # the launcher's name, renamed
    assert "num_nodes" not in translated.data["execution"]
    native = compose(run, [], translation=NATIVE)
    assert native.data["execution"]["num_nodes"] == 2  # left for the schema to refuse
    assert native.data["execution"].get("nodes") != 2


def test_a_launcher_defaults_entry_is_refused_only_by_the_nemo_hook(tmp_path: Path) -> None:
    run = _write(tmp_path, {**NATIVE_RUN, "defaults": [{"execution": "local-dev"},
                                                        {"deployment": "nim"}]})
    with pytest.raises(ConfigError, match="NIM deployments are out of scope"):
        compose(run, [], translation=TRANSLATION)
    with pytest.raises(ConfigError) as err:  # no such preset: found missing, not refused by name
        compose(run, [], translation=NATIVE)
    assert "NIM" not in str(err.value)


def test_only_the_hook_imports_the_compat_package() -> None:
    importers = set()
    for path in sorted((ROOT / "hpceval").rglob("*.py")):
        if "compat" in path.relative_to(ROOT / "hpceval").parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "hpceval.compat"):
                importers.add(str(path.relative_to(ROOT)))
    assert importers == {"hpceval/config/translation.py"}
