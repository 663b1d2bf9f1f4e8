"""An engine and a results parser from another installed distribution are found by name: the
throwaway distribution in tests/plugins/toy_engine is packed into a wheel, installed with pip
into a folder of its own, and a fresh interpreter that has it on its path validates and renders
a run with ``deployment.type: toyserve`` and loads a catalogue whose harness names its parser."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from support.plugins import build_wheel, pip_install

from hpceval.registry import Registry, UnknownName

ROOT = Path(__file__).parents[2]
PLUGIN = ROOT / "tests" / "plugins" / "toy_engine"
DIST = "hpceval_toy_engine-0.1"

PROBE = textwrap.dedent('''
    import json, sys
    from pathlib import Path
    from hpceval.config import load_config
    from hpceval.engines import engine_names
    from hpceval.render import JobContext, render_job
    from hpceval.tasks.adapters import get_parser
    from hpceval.tasks.loader import build_index
    resolved = load_config(Path(sys.argv[1]), [], profile="local-dev", check_environment=False)
    ctx = JobContext("/runs/inv-1", "inv-1", "m", "/venv/bin/python", hpceval_version="0.1.0")
    index = build_index([Path(sys.argv[2])])
    print(json.dumps({"names": list(engine_names()), "script": render_job(resolved, ctx),
                      "parser": get_parser("toy").__module__,
                      "harness_parsers": [h["parser"] for h in index["harnesses"]]}))
''')

CATALOGUE = """\
schema: 1
harness:
  name: toyharness
  description: a harness whose results the toy distribution parses
  runtime: host
  parser: toy
  default_endpoint_type: chat
  command: "toy-eval {{ task.task_id | q }}"
tasks:
  - {name: toy_task, endpoint_type: chat, description: one toy task}
"""


def test_an_engine_of_another_distribution_is_found_by_name(tmp_path: Path) -> None:
    site = pip_install(build_wheel(tmp_path, PLUGIN, "hpceval-toy-engine", "0.1",
                                   ("hpceval_toy_engine.py",)), tmp_path / "site")
    assert (site / f"{DIST}.dist-info" / "entry_points.txt").is_file()  # pip installed it
    run = tmp_path / "run.yaml"
    run.write_text(yaml.safe_dump({
        "execution": {"output_dir": str(tmp_path / "runs"), "gpus_per_node": 2},
        "deployment": {"type": "toyserve", "checkpoint_path": "/models/m",
                       "served_model_name": "m", "runtime": "host", "tensor_parallel_size": 2},
        "evaluation": {"tasks": [{"name": "gsm8k"}]},
    }))
    catalogue = tmp_path / "toy.yaml"
    catalogue.write_text(CATALOGUE)
    proc = subprocess.run([sys.executable, "-c", PROBE, str(run), str(catalogue)], cwd=tmp_path,
                          env={"PYTHONPATH": f"{ROOT}:{site}", "PATH": "/usr/bin:/bin",
                               "HOME": str(tmp_path)},
                          capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["names"][-1] == "toyserve"  # after the built-ins: its order is 20
    assert "  toyserve /models/m \\\n    --name m \\\n    --port \"${PORT}\"" in out["script"]
    assert "INSTANCE_READY+=('toyserve is up')" in out["script"]
    assert out["parser"] == "hpceval_toy_engine"
    assert out["harness_parsers"] == ["toy"]  # the catalogue's check found the plugin's parser


def test_without_the_distribution_the_name_is_unknown_with_a_hint(tmp_path: Path) -> None:
    from hpceval.config import ConfigError, load_config

    run = tmp_path / "run.yaml"
    run.write_text(yaml.safe_dump({
        "execution": {"output_dir": str(tmp_path / "runs")},
        "deployment": {"type": "vlm", "checkpoint_path": "/models/m"},
        "evaluation": {"tasks": [{"name": "gsm8k"}]},
    }))
    with pytest.raises(ConfigError) as err:
        load_config(run, [], profile="local-dev", check_environment=False)
    assert [i.path for i in err.value.issues] == ["deployment.type"]


class _Thing:
    def __init__(self, name: str, order: int) -> None:
        self.name, self.order = name, order


def test_a_registry_refuses_twins_and_suggests_the_closest_name() -> None:
    things: Registry[_Thing] = Registry("thing", "hpceval.tests.none", order=lambda t: t.order)
    things.register(_Thing("beta", 2))
    things.register(_Thing("alpha", 1))
    assert things.names() == ("alpha", "beta")  # by order, not by registration
    with pytest.raises(ValueError, match="two things are named 'beta'"):
        things.register(_Thing("beta", 3))
    with pytest.raises(UnknownName, match=r"unknown thing 'alpah' \(known: alpha, beta\); "
                                          r"did you mean 'alpha'\?"):
        things.get("alpah")
    assert "alpha" in things and "gamma" not in things


def test_a_lazy_entry_is_imported_only_when_asked_for() -> None:
    lazy: Registry[object] = Registry("codec", "hpceval.tests.none", lazy={
        "json": "json:dumps", "nope": "hpceval_no_such_module:thing"})
    assert "nope" in lazy  # known by its declaration: membership imports nothing
    assert lazy.get("json") is json.dumps
    with pytest.raises(ModuleNotFoundError):
        lazy.get("nope")


def test_installed_entry_points_are_read_once_for_every_registry(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading entry points scans every dist-info folder on sys.path: the registries share one
    read per process, each selecting its group."""
    import importlib.metadata

    from hpceval import registry

    calls = []
    real = importlib.metadata.entry_points

    def counted(**kwargs: object) -> object:
        calls.append(kwargs)
        return real(**kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.metadata, "entry_points", counted)
    registry._installed.cache_clear()
    try:
        for group in ("hpceval.engines", "hpceval.runtimes", "hpceval.parsers"):
            with pytest.raises(UnknownName):
                Registry("thing", group).get("no-such-plugin")
        assert calls == [{}]  # one read of all groups, not one per registry
    finally:
        registry._installed.cache_clear()
