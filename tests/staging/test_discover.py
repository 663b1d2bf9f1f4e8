"""``hpceval tasks discover``: framework.yml inside a SIF (served by the strict fake apptainer)
becomes user-catalogue tasks, never duplicating and never shrinking the catalogue."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from staging_helpers import DATA, FDF_PATH, INHOUSE_FDF_PATH, SIMPLE_EVALS, Fakes, Site, fake_sif

from hpceval.cli.main import cli
from hpceval.staging import stage
from hpceval.staging.discover import FIND, DiscoverError, discover
from hpceval.tasks import Catalogue, load_catalogue
from hpceval.tasks.loader import clear_memory_cache

SE_FDF = (DATA / "simple_evals_framework.yml").read_text()
INHOUSE_FDF = (DATA / "inhouse_framework.yml").read_text()
NEW_SE = ["AIME_2026", "gpqa_diamond_aa_v4", "mmlu_pro_completions", "math_test_500_lite"]


def _user_file(name: str) -> Path:
    return Path(os.environ["XDG_CONFIG_HOME"]) / "hpceval" / "tasks" / f"{name}.yaml"


def _catalogue() -> Catalogue:
    clear_memory_cache()
    return load_catalogue()


def test_adds_what_the_catalogue_lacks_to_the_existing_harness(fakes: Fakes,
                                                               tmp_path: Path) -> None:
    before = len(load_catalogue().tasks)
    sif = fake_sif(tmp_path / "se.sif", {FDF_PATH: SE_FDF, "/etc/hosts": "x"}, SIMPLE_EVALS)
    [found] = discover(sif)
    assert (found.harness, found.new_harness, found.written) == ("simple_evals", False, True)
    assert found.added == NEW_SE
    assert found.known == ["AIME_2025", "gpqa_diamond", "simpleqa"]
    assert found.skipped == ["spoken_qa: endpoint types ['audio'] (hpceval knows chat, "
                             "completions, vlm, embedding)"]
    assert found.path == _user_file("simple_evals")
    # exactly the calls the fake allows: inspect, then find, then one cat per file found
    assert fakes.calls("apptainer") == [
        ["inspect", "--json", str(sif)],
        ["exec", "--contain", "--cleanenv", str(sif), *FIND],
        ["exec", "--contain", "--cleanenv", str(sif), "cat", FDF_PATH]]

    catalogue = _catalogue()
    assert len(catalogue.tasks) == before + 4
    aime = catalogue.resolve("simple_evals.AIME_2026").task
    assert (aime.endpoint_type, aime.needs_judge, aime.required_env) == (
        "chat", True, ("JUDGE_API_KEY",))
    assert aime.description == "AIME 2026 questions, math, answers checked by a judge"
    assert aime.image == SIMPLE_EVALS and aime.sif == "eval-factory_simple-evals_26.03.sif"
    aa = catalogue.resolve("simple_evals.gpqa_diamond_aa_v4").task
    assert (aa.task_id, aa.required_env) == ("gpqa_diamond_aa_v4_chat", ("HF_TOKEN",))
    assert catalogue.resolve("simple_evals.mmlu_pro_completions").task.endpoint_type == (
        "completions")
    lite = catalogue.resolve("simple_evals.math_test_500_lite").task
    assert lite.description == "math_test_500_lite (from the simple_evals framework definition)"
    assert not lite.params  # per-task settings stay in the image


def test_discovering_again_changes_nothing(fakes: Fakes, tmp_path: Path) -> None:
    sif = fake_sif(tmp_path / "se.sif", {FDF_PATH: SE_FDF}, SIMPLE_EVALS)
    discover(sif)
    stat = _user_file("simple_evals").stat()
    [again] = discover(sif)
    assert again.added == [] and not again.written
    assert sorted(again.known) == sorted(["AIME_2025", "gpqa_diamond", "simpleqa", *NEW_SE])
    assert _user_file("simple_evals").stat().st_mtime_ns == stat.st_mtime_ns


def test_a_newer_image_extends_the_file_and_keeps_its_tasks(fakes: Fakes,
                                                             tmp_path: Path) -> None:
    discover(fake_sif(tmp_path / "a.sif", {FDF_PATH: SE_FDF}, SIMPLE_EVALS))
    newer = SE_FDF.replace("  - name: spoken_qa", "  - name: AIME_2027\n    description: next\n"
                           "  - name: spoken_qa")
    older = newer.replace("  - name: AIME_2026", "  - name: AIME_2026_removed")
    [found] = discover(fake_sif(tmp_path / "b.sif", {FDF_PATH: older}, SIMPLE_EVALS))
    assert found.added == ["AIME_2026_removed", "AIME_2027"]
    names = [t["name"] for t in yaml.safe_load(_user_file("simple_evals").read_text())["tasks"]]
    assert names == [*NEW_SE, "AIME_2026_removed", "AIME_2027"]  # never smaller


def test_tasks_another_user_file_adds_count_as_known(fakes: Fakes, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump({"harness": "simple-evals", "tasks": [
        {"name": "AIME_2026", "endpoint_type": "chat", "description": "my own"}]}))
    monkeypatch.setenv("HPCEVAL_TASKS_PATH", str(mine))
    [found] = discover(fake_sif(tmp_path / "se.sif", {FDF_PATH: SE_FDF}, SIMPLE_EVALS))
    assert "AIME_2026" in found.known and "AIME_2026" not in found.added
    assert _catalogue().resolve("simple_evals.AIME_2026").task.description == "my own"


def test_a_new_framework_becomes_a_new_harness(fakes: Fakes, tmp_path: Path) -> None:
    sif = fake_sif(tmp_path / "inhouse_1.4.sif", {INHOUSE_FDF_PATH: INHOUSE_FDF})
    with pytest.raises(DiscoverError, match="pass --image REPO:TAG"):
        discover(sif)
    assert not _user_file("inhouse-qa").exists()

    [found] = discover(sif, image="registry.example.org/evals/inhouse-qa:1.4")
    assert found.new_harness and found.added == ["tickets", "tickets_chat"]
    catalogue = _catalogue()
    harness = catalogue.harness("inhouse-qa")
    assert (harness.image, harness.sif, harness.runtime, harness.parser) == (
        "registry.example.org/evals/inhouse-qa:1.4", "inhouse_1.4.sif", "container",
        "eval_factory")
    assert harness.default_endpoint_type == "completions"
    assert "nemo-evaluator run_eval" in harness.command  # the shared eval-factory template
    chat = catalogue.resolve("tickets_chat").task
    assert (chat.endpoint_type, chat.needs_judge, chat.required_env) == (
        "chat", True, ("INHOUSE_JUDGE_KEY",))

    # rediscovering keeps the harness definition in the file that holds it
    bigger = INHOUSE_FDF + ("  - name: tickets_fr\n    description: French tickets\n"
                            "    defaults: {config: {type: tickets_fr}}\n")
    [again] = discover(fake_sif(tmp_path / "inhouse_1.4.sif", {INHOUSE_FDF_PATH: bigger}))
    assert again.added == ["tickets_fr"] and again.new_harness
    assert _catalogue().harness("inhouse-qa").image == "registry.example.org/evals/inhouse-qa:1.4"


def test_an_image_with_two_frameworks_gives_two_files(fakes: Fakes, tmp_path: Path) -> None:
    sif = fake_sif(tmp_path / "both.sif", {FDF_PATH: SE_FDF, INHOUSE_FDF_PATH: INHOUSE_FDF})
    found = discover(sif, image="registry.example.org/evals/both:1")
    assert [(f.harness, len(f.added)) for f in found] == [("inhouse-qa", 2), ("simple_evals", 4)]
    assert _user_file("inhouse-qa").is_file() and _user_file("simple_evals").is_file()


def test_a_file_discover_did_not_write_is_never_replaced(fakes: Fakes, tmp_path: Path) -> None:
    target = _user_file("simple_evals")
    target.parent.mkdir(parents=True)
    target.write_text("harness: simple_evals\ntasks: []\n")
    with pytest.raises(DiscoverError, match="was not written by `hpceval tasks discover`"):
        discover(fake_sif(tmp_path / "se.sif", {FDF_PATH: SE_FDF}, SIMPLE_EVALS))
    assert target.read_text() == "harness: simple_evals\ntasks: []\n"


def test_images_without_a_framework_or_not_images_are_refused(fakes: Fakes,
                                                              tmp_path: Path) -> None:
    with pytest.raises(DiscoverError, match=r"no core_evals/\*/framework.yml in it"):
        discover(fake_sif(tmp_path / "plain.sif", {"/etc/os-release": "debian"}))
    (tmp_path / "junk.sif").write_text("not an image")
    with pytest.raises(DiscoverError, match="image format not recognized"):
        discover(tmp_path / "junk.sif")


def test_cli_discovers_a_staged_image(fakes: Fakes, site: Site) -> None:
    """The whole path: stage pulls the image (recording its reference), discover reads it."""
    stage(site.load(site.run_file([{"name": "simple_evals.gpqa_diamond"}])))
    sif = site.image_dir / "eval-factory_simple-evals_26.03.sif"
    result = CliRunner().invoke(cli, ["tasks", "discover", str(sif), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "harness simple_evals: 4 task(s) added, 3 already in the catalogue" in result.output
    assert "  + simple_evals.AIME_2026" in result.output
    assert "would write" in result.output and not _user_file("simple_evals").exists()

    result = CliRunner().invoke(cli, ["tasks", "discover", str(sif)])
    assert result.exit_code == 0 and f"wrote {_user_file('simple_evals')}" in result.output
    listed = CliRunner().invoke(cli, ["ls", "tasks", "--harness", "simple_evals"])
    assert "AIME_2026" in listed.output

    bad = CliRunner().invoke(cli, ["tasks", "discover", str(site.root / "missing.sif")])
    assert bad.exit_code == 1 and "no such image file" in bad.output


def test_a_venv_of_harness_packages_is_read_without_any_container(fakes: Fakes,
                                                                  tmp_path: Path) -> None:
    """container_runtime none: the packages' framework.yml files in a venv, no apptainer call."""
    venv = tmp_path / "venv"
    fdf = venv / "lib" / "python3.11" / "site-packages" / "core_evals" / "simple_evals"
    fdf.mkdir(parents=True)
    # nvidia-lm-eval 26.3 names evaluations for display ("ARC Challenge"); the type is what runs
    display = SE_FDF.replace("  - name: math_test_500_lite\n", "  - name: MATH 500 (lite)\n")
    assert display != SE_FDF
    (fdf / "framework.yml").write_text(display)
    [found] = discover(venv, dry_run=True)
    assert found.added == NEW_SE and found.skipped == [
        "spoken_qa: endpoint types ['audio'] (hpceval knows chat, completions, vlm, embedding)"]
    assert fakes.calls("apptainer") == []
    (fdf / "framework.yml").unlink()
    with pytest.raises(DiscoverError, match=r"no core_evals/\*/framework\.yml in it"):
        discover(venv)
