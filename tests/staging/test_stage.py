"""``hpceval stage`` against the strict fake apptainer (and enroot, ch-image and ch-convert): what
is pulled, where, how, and when not."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from staging_helpers import LM_EVAL, SIMPLE_EVALS, Fakes, Site, digest

from hpceval.cli.main import cli
from hpceval.config.errors import ConfigError
from hpceval.images import sif_name
from hpceval.staging import stage
from hpceval.staging.stage import MANIFEST
from hpceval.tasks import load_catalogue

SE_SIF = "eval-factory_simple-evals_26.03.sif"
LM_SIF = "eval-factory_lm-evaluation-harness_26.03.sif"


def test_sif_names_follow_the_catalogue_rule() -> None:
    catalogue = load_catalogue()
    containers = [h for h in catalogue.harnesses.values() if h.image]
    assert len(containers) >= 20
    for harness in containers:
        assert harness.image is not None
        assert sif_name(harness.image) == harness.sif, harness.name
    assert sif_name("vllm/vllm-openai:v0.11.0") == "vllm_vllm-openai_v0.11.0.sif"
    assert sif_name("localhost:5000/ubuntu") == "ubuntu.sif"
    assert (sif_name("ghcr.io/o/r@sha256:" + "ab" * 32)
            == "o_r_sha256-abababababab.sif")


def test_pulls_each_missing_image_once_to_a_temp_name_then_renames(
        fakes: Fakes, site: Site) -> None:
    report = stage(site.load(site.run_file()))
    assert report.ok
    assert [(i.action, Path(i.name).name) for i in report.items] == [
        ("pulled", SE_SIF), ("pulled", LM_SIF)]
    pulls = fakes.pulls()
    assert [p[3] for p in pulls] == [f"docker://{SIMPLE_EVALS}", f"docker://{LM_EVAL}"]
    for argv, final in zip(pulls, (SE_SIF, LM_SIF), strict=True):
        assert argv[:2] == ["pull", "--force"]
        dest = Path(argv[2])  # pulled beside the final file, under a hidden temporary name
        assert dest.parent == site.image_dir and dest.name.startswith(f".{final}.")
        assert not dest.exists()
    sif = site.image_dir / SE_SIF
    assert json.loads(sif.read_text())["name"] == SIMPLE_EVALS  # the fake's content, renamed
    mask = os.umask(0)
    os.umask(mask)
    assert sif.stat().st_mode & 0o777 == 0o666 & ~mask  # not mkstemp's private 0600
    sidecar = json.loads((site.image_dir / f"{SE_SIF}.json").read_text())
    assert sidecar["reference"] == SIMPLE_EVALS and sidecar["size"] == sif.stat().st_size
    assert sidecar["digest"] is None  # no skopeo on PATH: nothing to compare with later
    assert not list(site.image_dir.glob("*.pulling"))
    manifest = json.loads((site.image_dir / MANIFEST).read_text())
    assert set(manifest["images"]) == {SE_SIF, LM_SIF}
    assert manifest["images"][SE_SIF]["staged_for"] == "evaluation.tasks.simple_evals.gpqa_diamond"


def test_a_staged_image_is_not_pulled_again(fakes: Fakes, site: Site) -> None:
    configs = site.load(site.run_file())
    stage(configs)
    before = len(fakes.pulls())
    report = stage(configs)
    assert len(fakes.pulls()) == before
    assert {i.action for i in report.items} == {"present"}
    assert "digest not checked" in report.items[0].detail


def test_skopeo_digest_is_recorded_and_a_moved_tag_is_pulled_again(
        fakes: Fakes, site: Site) -> None:
    fakes.enable("skopeo")
    configs = site.load(site.run_file([{"name": "simple_evals.gpqa_diamond"}]))
    stage(configs)
    repo = SIMPLE_EVALS.rpartition(":")[0]
    assert fakes.pulls()[-1][3] == f"docker://{repo}@{digest(1)}"  # exactly what was recorded
    assert json.loads((site.image_dir / f"{SE_SIF}.json").read_text())["digest"] == digest(1)
    assert ["inspect", "--format", "{{.Digest}}", f"docker://{SIMPLE_EVALS}"] in fakes.calls(
        "skopeo")

    assert stage(configs).items[0].action == "present"  # same digest: kept
    assert len(fakes.pulls()) == 1

    fakes.add_image(SIMPLE_EVALS, digest(3))  # the registry moved the tag
    item = stage(configs).items[0]
    assert item.action == "pulled"
    assert fakes.pulls()[-1][3] == f"docker://{repo}@{digest(3)}"
    assert json.loads((site.image_dir / f"{SE_SIF}.json").read_text())["digest"] == digest(3)


def test_a_failed_pull_leaves_nothing_behind_and_exits_1(fakes: Fakes, site: Site) -> None:
    run = site.run_file([{"name": "simple_evals.gpqa_diamond"}, {"name": "mmath.mmath_en"}])
    result = CliRunner().invoke(cli, ["stage", str(run)])
    assert result.exit_code == 1, result.output
    assert "failed" in result.output and "manifest unknown" in result.output
    assert "1 item(s) not staged" in result.stderr
    names = {p.name for p in site.image_dir.iterdir()}
    assert SE_SIF in names and "eval-factory_mmath_26.03.sif" not in names
    assert not [n for n in names if n.endswith((".pulling", ".tmp"))]


def test_a_sif_staged_by_someone_else_is_kept_unless_forced(fakes: Fakes, site: Site) -> None:
    site.image_dir.mkdir()
    (site.image_dir / SE_SIF).write_text("an admin's own build")
    configs = site.load(site.run_file([{"name": "simple_evals.gpqa_diamond"}]))
    item = stage(configs).items[0]
    assert item.action == "present" and "not staged by hpceval" in item.detail
    assert fakes.pulls() == []
    assert stage(configs, force=True).items[0].action == "pulled"
    assert "an admin" not in (site.image_dir / SE_SIF).read_text()


def test_dry_run_says_what_it_would_do_and_does_nothing(fakes: Fakes, site: Site) -> None:
    result = CliRunner().invoke(cli, ["stage", str(site.run_file()), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert result.output.count("would-pull") == 2
    assert f"docker://{SIMPLE_EVALS}" in result.output
    assert "dry run: nothing was pulled or written" in result.output
    assert fakes.pulls() == [] and not site.image_dir.exists()


def test_offline_without_image_dir_is_a_config_error_and_does_nothing(
        fakes: Fakes, site: Site) -> None:
    run = site.run_file(execution={"image_dir": None})
    result = CliRunner().invoke(cli, ["stage", str(run)])
    assert result.exit_code == 2
    assert "execution.image_dir: compute nodes are offline" in result.stderr
    assert fakes.calls() == []


def test_online_without_image_dir_leaves_pulls_to_the_job(fakes: Fakes, site: Site) -> None:
    run = site.run_file([{"name": "simple_evals.gpqa_diamond"}],
                        execution={"image_dir": None, "offline": False})
    [item] = stage(site.load(run)).items
    assert (item.action, item.name) == ("run-time", f"docker://{SIMPLE_EVALS}")
    assert fakes.calls() == []


def _vllm(site: Site, image: str, execution: dict[str, Any] | None = None,
          **extra: Any) -> Path:
    checkpoint = site.root / "ckpt"
    checkpoint.mkdir(exist_ok=True)
    return site.run_file(
        [{"name": "simple_evals.gpqa_diamond"}],
        deployment={"type": "vllm", "image": image, "checkpoint_path": str(checkpoint),
                     "served_model_name": "m", **extra},
        execution={"gpus_per_node": 1, **(execution or {})}, target={"api_endpoint": {}})


def test_a_missing_server_sif_needs_its_source_once(fakes: Fakes, site: Site) -> None:
    fakes.add_image("vllm/vllm-openai:v0.11.0", digest(5))
    server = site.root / "server" / "vllm.sif"
    run = _vllm(site, str(server))
    with pytest.raises(ConfigError) as caught:
        stage(site.load(run))
    [issue] = caught.value.issues
    assert issue.path == "deployment.image" and "--pull vllm.sif=docker://" in issue.fix
    assert fakes.calls() == []

    result = CliRunner().invoke(cli, ["stage", str(run), "--pull",
                                      "vllm.sif=docker://vllm/vllm-openai:v0.11.0"])
    assert result.exit_code == 0, result.output
    assert server.is_file() and json.loads(server.read_text())["name"] == "vllm/vllm-openai:v0.11.0"
    # the sidecar now names the source: no --pull needed again
    assert {i.action for i in stage(site.load(run)).items} == {"present"}


@pytest.mark.parametrize(("runtime", "tools", "suffix", "kind"), [
    ("apptainer", ["apptainer"], ".sif", "SIF"),
    ("charliecloud", ["ch-image", "ch-convert"], ".sqfs", "SquashFS")])
def test_a_docker_server_image_is_staged_and_the_switch_suggested(
        fakes: Fakes, site: Site, runtime: str, tools: list[str], suffix: str,
        kind: str) -> None:
    fakes.add_image("vllm/vllm-openai:v0.11.0", digest(5))
    fakes.enable(*(t for t in tools if t != "apptainer"))
    run = _vllm(site, "docker://vllm/vllm-openai:v0.11.0", {"container_runtime": runtime})
    report = stage(site.load(run))
    staged = site.image_dir / f"vllm_vllm-openai_v0.11.0{suffix}"
    assert json.loads(staged.read_text())["name"] == "vllm/vllm-openai:v0.11.0"  # the fakes'
    # one pull of it (charliecloud: pulled, then converted)
    assert fakes.progs("vllm/vllm-openai") == tools
    assert report.hints == [f"the job still pulls docker://vllm/vllm-openai:v0.11.0 at run time; "
                            f"to run the staged {kind}: -o deployment.image={staged}"]


def test_singularity_sites_pull_with_singularity(fakes: Fakes, site: Site) -> None:
    fakes.enable("singularity")
    run = site.run_file([{"name": "simple_evals.gpqa_diamond"}],
                        execution={"container_runtime": "singularity"})
    assert stage(site.load(run)).ok
    assert fakes.calls("singularity")[0][:2] == ["pull", "--force"]
    assert fakes.calls("apptainer") == []


class FakeHub:
    """snapshot_download's signature and its cache layout, without the network."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def __call__(self, *, repo_id: str, cache_dir: str, allow_patterns: list[str] | None) -> str:
        self.calls.append({"repo_id": repo_id, "cache_dir": cache_dir,
                           "allow_patterns": allow_patterns})
        snap = Path(cache_dir) / f"models--{repo_id.replace('/', '--')}" / "snapshots" / "abc"
        snap.mkdir(parents=True)
        name = "tokenizer_config.json" if allow_patterns else "config.json"
        (snap / name).write_text("{}")
        return str(snap)


def test_model_and_tokenizers_go_to_the_shared_hf_cache(fakes: Fakes, site: Site) -> None:
    fakes.add_image("vllm/vllm-openai:v0.11.0", digest(5))
    run = site.run_file(
        [{"name": "lm-eval-upstream.gsm8k",
          "params": {"extra": {"tokenizer": "org/tok"}}}],
        deployment={"type": "vllm", "image": "docker://vllm/vllm-openai:v0.11.0",
                    "hf_model_handle": "org/model", "served_model_name": "m"},
        execution={"gpus_per_node": 1}, target={"api_endpoint": {}})
    hub = FakeHub()
    report = stage(site.load(run), downloader=hub)
    data = [(i.action, i.name) for i in report.items if i.kind == "data"]
    assert data == [("fetched", "model:org/model"), ("fetched", "tokenizer:org/tok")]
    assert [c["cache_dir"] for c in hub.calls] == [str(site.hf_cache / "hub")] * 2
    assert hub.calls[0]["allow_patterns"] is None and "tokenizer*" in hub.calls[1]["allow_patterns"]
    manifest = json.loads((site.image_dir / MANIFEST).read_text())
    assert set(manifest["data"]) == {"model:org/model", "tokenizer:org/tok"}

    again = stage(site.load(run), downloader=hub)
    assert [i.action for i in again.items if i.kind == "data"] == ["cached", "cached"]
    assert len(hub.calls) == 2

    (site.hf_cache / "hub").rename(site.root / "gone")
    bare = stage(site.load(run), downloader=None)
    manual = [i for i in bare.items if i.kind == "data"]
    assert not bare.ok and {i.action for i in manual} == {"manual"}
    assert f"hf download org/tok --cache-dir {site.hf_cache / 'hub'}" in manual[1].detail


def test_pyxis_sites_import_sqsh_images_with_enroot(fakes: Fakes, site: Site) -> None:
    fakes.enable("enroot")
    run = site.run_file(execution={"container_runtime": "pyxis"})
    report = stage(site.load(run))
    assert report.ok, report.items
    assert fakes.pulls() == []  # no apptainer where pyxis runs the images
    imports = fakes.calls("enroot")
    se_sqsh, lm_sqsh = SE_SIF.replace(".sif", ".sqsh"), LM_SIF.replace(".sif", ".sqsh")
    # enroot's spelling of a registry host (nvcr.io#...), into a fresh hidden name beside
    # the final file (enroot refuses to write over one)
    assert [argv[3] for argv in imports] == [
        "docker://" + SIMPLE_EVALS.replace("/", "#", 1), "docker://" + LM_EVAL.replace("/", "#", 1)]
    for argv, final in zip(imports, (se_sqsh, lm_sqsh), strict=True):
        assert argv[:2] == ["import", "--output"]
        dest = Path(argv[2])
        assert dest.parent == site.image_dir and dest.name.startswith(f".{final}.")
        assert not dest.exists()
    sqsh = site.image_dir / se_sqsh
    assert json.loads(sqsh.read_text())["name"] == SIMPLE_EVALS
    assert json.loads((site.image_dir / f"{se_sqsh}.json").read_text())["reference"] == \
        SIMPLE_EVALS
    assert not list(site.image_dir.glob("*.sif")) and not list(site.image_dir.glob("*.pulling"))
    # the job runs what stage wrote
    from hpceval.render import JobContext, render_job

    resolved = site.load(run)[0]
    text = render_job(resolved, JobContext("/r/inv-1", "inv-1", "m", "/py"))
    assert f"--container-image={sqsh}" in text
    again = stage(site.load(run))
    assert {i.action for i in again.items} == {"present"} and len(fakes.calls("enroot")) == 2


def test_charliecloud_sites_pull_sqfs_images_with_ch_image_and_ch_convert(
        fakes: Fakes, site: Site, tmp_path: Path) -> None:
    """The one pull line (runtimes/charliecloud.py, PULL_SCRIPT) against the strict fakes:
    ch-image pulls the reference (no docker://) into its storage, ch-convert makes the
    SquashFS file of it, under a hidden temporary name beside the final file."""
    fakes.enable("ch-image", "ch-convert")
    run = site.run_file(execution={"container_runtime": "charliecloud"})
    report = stage(site.load(run))
    assert report.ok, report.items
    assert fakes.pulls() == []  # no apptainer where Charliecloud runs the images
    assert fakes.progs() == ["ch-image", "ch-convert"] * 2
    assert fakes.calls("ch-image") == [["pull", SIMPLE_EVALS], ["pull", LM_EVAL]]
    se_sqfs, lm_sqfs = SE_SIF.replace(".sif", ".sqfs"), LM_SIF.replace(".sif", ".sqfs")
    for argv, ref, final in zip(fakes.calls("ch-convert"), (SIMPLE_EVALS, LM_EVAL),
                                (se_sqfs, lm_sqfs), strict=True):
        assert argv[:5] == ["-i", "ch-image", "-o", "squash", ref]
        dest = Path(argv[5])
        assert dest.parent == site.image_dir and dest.name.startswith(f".{final}.")
        assert not dest.exists()
    sqfs = site.image_dir / se_sqfs
    assert json.loads(sqfs.read_text())["name"] == SIMPLE_EVALS
    assert json.loads((site.image_dir / f"{se_sqfs}.json").read_text())["reference"] == \
        SIMPLE_EVALS
    assert not list(site.image_dir.glob("*.sif")) and not list(site.image_dir.glob("*.pulling"))
    # ch-image's storage is its own (CH_IMAGE_STORAGE, set by the fixture), not image_dir
    assert (tmp_path / "ch-storage" / "img").is_dir()
    # the job runs what stage wrote
    from hpceval.render import JobContext, render_job

    resolved = site.load(run)[0]
    text = render_job(resolved, JobContext("/r/inv-1", "inv-1", "m", "/py"))
    assert str(sqfs) in text and "ch-run" in text
    again = stage(site.load(run))
    assert {i.action for i in again.items} == {"present"} and len(fakes.calls("ch-image")) == 2


def test_a_missing_enroot_is_a_clear_failure(fakes: Fakes, site: Site) -> None:
    run = site.run_file([{"name": "simple_evals.gpqa_diamond"}],
                        execution={"container_runtime": "pyxis"})
    report = stage(site.load(run))
    assert not report.ok
    assert "enroot not found on PATH" in report.items[0].detail
    assert [p.name for p in site.image_dir.iterdir() if not p.name.endswith(".lock")] == []
