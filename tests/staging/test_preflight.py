"""Preflight: every failure that would only show after queueing is refused before sbatch, with
the command that fixes it; secrets are named, never shown."""

from __future__ import annotations

from pathlib import Path

import pytest
from staging_helpers import Fakes, Site, fake_sif

from hpceval.config.errors import ConfigError
from hpceval.staging import check_preflight, preflight, preflight_all, stage
from hpceval.staging.preflight import preflight_notes

SECRET = "s3cr3t-value-never-shown"


def _issues(site: Site, run: Path, environ: dict[str, str] | None = None) -> list[str]:
    [resolved] = site.load(run)
    # gpqa_diamond needs $HF_TOKEN (gated data): set unless a test says otherwise
    env = {"HF_TOKEN": SECRET} if environ is None else environ
    return [str(i) for i in preflight(resolved, environ=env)]


def test_missing_sifs_are_refused_with_the_stage_command(site: Site) -> None:
    run = site.run_file()
    issues = _issues(site, run)
    assert len(issues) == 2  # simple_evals tasks share one image
    sif = site.image_dir / "eval-factory_simple-evals_26.03.sif"
    assert issues[0].startswith(f"evaluation.tasks.simple_evals.gpqa_diamond: SIF {sif} "
                                "(harness simple_evals) is missing")
    assert f"run `hpceval stage {run}` on the login node" in issues[0]
    assert "shared storage" in issues[0]


def test_pyxis_sites_are_told_of_squashfs_images_not_sifs(site: Site) -> None:
    run = site.run_file(execution={"container_runtime": "pyxis"})
    issues = _issues(site, run)
    sqsh = site.image_dir / "eval-factory_simple-evals_26.03.sqsh"
    assert issues[0].startswith(f"evaluation.tasks.simple_evals.gpqa_diamond: squashfs image "
                                f"(.sqsh) {sqsh} (harness simple_evals) is missing")
    assert "SIF" not in issues[0]


def test_the_fix_names_the_same_overrides(site: Site) -> None:
    run = site.run_file([{"name": "simple_evals.gpqa_diamond"}])
    [resolved] = site.load(run, ("execution.nodes=2",))
    [issue] = preflight(resolved, environ={"HF_TOKEN": SECRET})
    assert f"hpceval stage {run} -o execution.nodes=2" in issue.fix


def test_staged_images_pass(fakes: Fakes, site: Site) -> None:
    run = site.run_file()
    stage(site.load(run))
    assert _issues(site, run) == []


def test_offline_nodes_cannot_pull_at_run_time(site: Site) -> None:
    run = site.run_file([{"name": "simple_evals.gpqa_diamond"}], execution={"image_dir": None})
    [issue] = _issues(site, run)
    assert "compute nodes are offline (execution.offline), but docker://nvcr.io/" in issue
    assert "set execution.image_dir to a shared folder, run `hpceval stage" in issue
    online = site.run_file([{"name": "simple_evals.gpqa_diamond"}], name="online.yaml",
                           execution={"image_dir": None, "offline": False})
    assert _issues(site, online) == []


def test_checkpoint_must_be_visible_from_the_login_node(site: Site) -> None:
    checkpoint = site.root / "ckpt"
    run = site.run_file([{"name": "lm-eval-upstream.gsm8k"}],
                        deployment={"type": "vllm", "runtime": "host", "served_model_name": "m",
                                    "checkpoint_path": str(checkpoint)},
                        execution={"gpus_per_node": 1}, target={"api_endpoint": {}})
    [issue] = _issues(site, run)
    assert issue.startswith(f"deployment.checkpoint_path: {checkpoint} is not a directory here")
    assert "login and compute nodes both mount" in issue
    checkpoint.mkdir()
    [issue] = _issues(site, run)
    assert "is an empty folder" in issue
    (checkpoint / "config.json").write_text("{}")
    assert _issues(site, run) == []


def test_a_judges_image_and_checkpoint_are_checked_too(site: Site) -> None:
    checkpoint = site.root / "judge-ckpt"
    sif = site.root / "judge-vllm.sif"
    run = site.run_file([{"name": "lm-eval-upstream.gsm8k"}],
                        deployment={"type": "vllm", "runtime": "host", "served_model_name": "m",
                                    "hf_model_handle": "org/m"},
                        execution={"gpus_per_node": 2}, target={"api_endpoint": {}},
                        auxiliary_deployments={"judge": {
                            "type": "vllm", "served_model_name": "j", "num_nodes": 0,
                            "checkpoint_path": str(checkpoint), "image": str(sif)}})
    issues = _issues(site, run)
    assert any(i.startswith(f"auxiliary_deployments.judge.image: SIF {sif} (server) "
                            "is missing") for i in issues), issues
    assert any(i.startswith(f"auxiliary_deployments.judge.checkpoint_path: {checkpoint} is "
                            "not a directory here") for i in issues), issues


def test_offline_hub_data_must_be_staged(site: Site) -> None:
    run = site.run_file([{"name": "lm-eval-upstream.gsm8k",
                          "params": {"extra": {"tokenizer": "org/tok"}}}])
    [issue] = _issues(site, run)
    assert issue.startswith("evaluation.tasks.lm-eval-upstream.gsm8k.params.extra.tokenizer: "
                            "compute nodes are offline and tokenizer org/tok is not staged in "
                            f"{site.hf_cache / 'hub'}")
    snap = site.hf_cache / "hub" / "models--org--tok" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "tokenizer.json").write_text("{}")
    assert _issues(site, run) == []


def test_local_paths_a_harness_reads_must_exist(site: Site) -> None:
    run = site.run_file([{"name": "lm-eval-upstream.my_task", "allow_unlisted": True,
                          "params": {"extra": {"include_path": "/nonexistent/tasks"}}}],
                        execution={"dataset_dir": str(site.root / "datasets")})
    issues = _issues(site, run)
    assert any(i.startswith(f"execution.dataset_dir: {site.root / 'datasets'} does not exist")
               for i in issues)
    assert any(i.startswith("evaluation.tasks.lm-eval-upstream.my_task.params.extra."
                            "include_path: /nonexistent/tasks does not exist") for i in issues)


def test_required_variables_are_named_never_shown(site: Site) -> None:
    run = site.run_file([{"name": "simple_evals.AIME_2025"}], execution={"offline": False,
                                                                         "image_dir": None})
    [issue] = _issues(site, run, {"OTHER": SECRET})
    assert issue == ("evaluation.tasks.simple_evals.AIME_2025.env_vars: simple_evals.AIME_2025 "
                     "needs $JUDGE_API_KEY, which is not set (fix: export JUDGE_API_KEY=... "
                     "before submitting (passed to the job by name; the value is never stored))")
    assert _issues(site, run, {"JUDGE_API_KEY": SECRET}) == []
    mapped = site.run_file([{"name": "simple_evals.AIME_2025",
                             "env_vars": {"JUDGE_API_KEY": "host:MY_JUDGE_KEY"}}],
                           name="mapped.yaml", execution={"offline": False, "image_dir": None})
    assert _issues(site, mapped, {"MY_JUDGE_KEY": SECRET}) == []


def test_check_preflight_raises_exit_2_with_every_issue(site: Site,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JUDGE_API_KEY", SECRET)
    monkeypatch.setenv("HF_TOKEN", SECRET)
    run = site.run_file([{"name": "simple_evals.AIME_2025"}, {"name": "simple_evals.mgsm"},
                         {"name": "lm-evaluation-harness.ifeval"}])
    configs = site.load(run)
    with pytest.raises(ConfigError) as caught:
        check_preflight(configs)
    assert caught.value.exit_code == 2
    # one per missing SIF (tasks sharing an image count once), and mgsm's dataset (the
    # catalogue lists juletxara/mgsm under data:) is not staged for the offline nodes
    assert len(caught.value.issues) == 3
    assert [i.path for i in caught.value.issues if "dataset" in i.message] == [
        "evaluation.tasks.simple_evals.mgsm"]
    assert SECRET not in str(caught.value)
    assert preflight_all(configs + configs) == caught.value.issues  # a sweep lists each once


SERVER_IMAGE = "docker://vllm/vllm-openai:v0.32.0"


def _server_run(site: Site, tmp_path: Path, **execution: object) -> Path:
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir(exist_ok=True)
    (checkpoint / "config.json").write_text("{}")
    return site.run_file([{"name": "lm-evaluation-harness.ifeval"}], execution={
        "gpus_per_node": 8, **execution}, deployment={
        "type": "vllm", "image": SERVER_IMAGE, "checkpoint_path": str(checkpoint),
        "served_model_name": "m", "tensor_parallel_size": 8})


def test_a_server_image_staged_from_docker_is_what_offline_nodes_run(
        site: Site, tmp_path: Path) -> None:
    """Issue 21, defect 4: the job runs the staged file (render's rule, the runtime's), so
    the preflight does not refuse it as a run-time pull, and refuses it before it is there."""
    run = _server_run(site, tmp_path)
    issues = [i for i in _issues(site, run) if i.startswith("deployment.image")]
    assert len(issues) == 1 and "would be pulled at run time" in issues[0]
    fake_sif(site.image_dir / "vllm_vllm-openai_v0.32.0.sif", {}, SERVER_IMAGE)
    assert not [i for i in _issues(site, run) if i.startswith("deployment.image")]


def test_online_sites_are_told_of_run_time_server_pulls(site: Site, tmp_path: Path) -> None:
    run = _server_run(site, tmp_path, offline=False)
    [resolved] = site.load(run)
    (note,) = map(str, preflight_notes(resolved))
    assert note.startswith(f"deployment.image: {SERVER_IMAGE} is pulled and converted at run "
                           "time")
    assert f"hpceval stage {run}" in note
    assert str(site.image_dir / "vllm_vllm-openai_v0.32.0.sif") in note
    assert not [i for i in preflight(resolved, environ={}) if i.path == "deployment.image"]
    fake_sif(site.image_dir / "vllm_vllm-openai_v0.32.0.sif", {}, SERVER_IMAGE)
    assert preflight_notes(site.load(run)) == []
    # offline: not a note but a refusal (the test above)
    assert preflight_notes(site.load(_server_run(site, tmp_path, image_dir=None))) == []


def _squashfs(path: Path) -> Path:
    """A real SquashFS file (mksquashfs, Debian's squashfs-tools), as enroot import and
    ch-convert write them."""
    import shutil
    import subprocess

    tool = shutil.which("mksquashfs")
    if tool is None:
        pytest.skip("mksquashfs (squashfs-tools) is not installed")
    tree = path.parent / "tree"
    (tree / "bin").mkdir(parents=True, exist_ok=True)
    (tree / "bin" / "sh").write_text("#!/bin/true\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([tool, str(tree), str(path), "-quiet", "-noappend"], check=True,
                   capture_output=True)
    return path


def test_an_image_of_a_format_the_runtime_does_not_run_is_refused(site: Site) -> None:
    """Issue 35 ("an image of the wrong format for the runtime fails before any GPU-hour"):
    the file's first bytes say what it is; pyxis and Charliecloud run SquashFS, Apptainer SIF
    or SquashFS."""
    from hpceval.images import image_format

    stem = "eval-factory_simple-evals_26.03"
    run = site.run_file([{"name": "simple_evals.gpqa_diamond"}],
                        execution={"container_runtime": "pyxis"})
    sqsh = site.image_dir / f"{stem}.sqsh"
    # a SIF copied under the .sqsh name: enroot would fail on the node after the queue wait
    sqsh.parent.mkdir(parents=True, exist_ok=True)
    sqsh.write_bytes(b"#!/usr/bin/env run-singularity\n\x00SIF_MAGIC" + bytes(200))
    [issue] = _issues(site, run)
    assert f"squashfs image (.sqsh) {sqsh} (harness simple_evals) is a SIF image, which pyxis " \
        "does not run (it runs SquashFS image files)" in issue, issue
    _squashfs(sqsh.with_suffix(".tmp")).replace(sqsh)
    assert image_format(sqsh) == "squashfs" and _issues(site, run) == []
    # Apptainer runs a SquashFS file as it is, and refuses a saved web page
    apptainer = site.run_file([{"name": "simple_evals.gpqa_diamond"}])
    sif = site.image_dir / f"{stem}.sif"
    sif.write_bytes(sqsh.read_bytes())
    assert _issues(site, apptainer) == []
    sif.write_text("<!DOCTYPE html><html><body>429 Too Many Requests</body></html>\n")
    [page] = _issues(site, apptainer)
    assert "is a web page (a download that saved an error page), which apptainer does not " \
        "run" in page, page
