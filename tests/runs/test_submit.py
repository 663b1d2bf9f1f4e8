"""Submitting: run directories, one sbatch per run (sweeps: one array), concurrency safety."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from support.runs import configs, write_run_file
from support.slurm import FakeSlurm

from hpceval.cli.main import cli
from hpceval.config.errors import ConfigError
from hpceval.runs.index import find_run, list_runs
from hpceval.runs.jobs import read_jobs
from hpceval.runs.registry import read_registry
from hpceval.runs.rundir import prepare_run
from hpceval.runs.submit import submit_configs


def test_single_model_run_directory(tmp_path: Path, fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path), fake)
    run_dir = result.run_dir
    assert [s["script"] for s in fake.submits] == [run_dir / "job.sbatch"]
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["sweep"] is False and manifest["models"][0]["key"] == "solo"
    assert [t["task"] for t in manifest["models"][0]["tasks"]] == ["ut-harness.ut_one",
                                                                    "ut-harness.ut_two"]
    assert yaml.safe_load((run_dir / "run.yaml").read_text())["deployment"]["type"] == "command"
    assert read_jobs(run_dir).ids == [result.job_ids[0]]
    assert (run_dir / "models" / "solo").is_dir() and (run_dir / "logs").is_dir()
    assert [r["invocation_id"] for r in read_registry(run_dir.parent)] == [result.invocation_id]
    assert find_run(result.invocation_id[:17]).run_dir == run_dir  # a unique prefix
    assert find_run(str(run_dir)).invocation_id == result.invocation_id  # a path


def test_a_20_model_sweep_is_one_sbatch_plus_aggregation(tmp_path: Path,
                                                         fake: FakeSlurm) -> None:
    result = submit_configs(configs(tmp_path, 20), fake)
    assert len(fake.submits) == 2  # ONE array job + one dependent aggregation job
    array, aggregate = fake.submits
    assert array["script"] == result.run_dir / "sweep.sbatch" and array["dependency"] is None
    assert aggregate["dependency"] == f"afterany:{array['id']}"
    dispatcher = (result.run_dir / "sweep.sbatch").read_text()
    assert "#SBATCH --array=0-19%2" in dispatcher  # local-dev: array_parallelism 2
    for i in range(20):
        key = f"model-{i:02d}"
        assert f"  {i}) MODEL_KEY={key} ;;" in dispatcher
        element = (result.run_dir / "models" / key / "job.sh").read_text()
        assert f"MODEL_KEY={key}\n" in element
    jobs = read_jobs(result.run_dir)
    assert jobs.current(7) is not None and jobs.current(7).scheduler_id(7) == f"{array['id']}_7"


def test_the_dispatcher_runs_the_element_slurm_names(tmp_path: Path, fake: FakeSlurm) -> None:
    """The dispatcher reads its array element through the Slurm backend's env partial
    (SLURM_ARRAY_TASK_ID as HPCEVAL_ARRAY_INDEX) and execs that model's job.sh."""
    result = submit_configs(configs(tmp_path, 3), fake)
    for key in ("model-00", "model-01", "model-02"):
        (result.run_dir / "models" / key / "job.sh").write_text(f"echo ran {key}\n")
    dispatcher = str(result.run_dir / "sweep.sbatch")
    env = {"PATH": os.environ["PATH"], "SLURM_ARRAY_TASK_ID": "1"}
    ran = subprocess.run(["bash", dispatcher], env=env, capture_output=True, text=True,
                         check=False, timeout=30)
    assert (ran.returncode, ran.stdout) == (0, "ran model-01\n"), ran.stderr
    env["SLURM_ARRAY_TASK_ID"] = "7"
    bad = subprocess.run(["bash", dispatcher], env=env, capture_output=True, text=True,
                         check=False, timeout=30)
    assert bad.returncode == 2 and "array element '7' (model 7) is not one of 0-2" in bad.stderr


def test_a_sweep_beyond_max_array_size_is_several_arrays_each_from_its_offset(
        tmp_path: Path, fake: FakeSlurm) -> None:
    """Three arrays of at most 8 elements for 20 models (MaxArraySize 8): the dispatcher adds
    its first argument to its element's index, jobs.json maps each model back to its element,
    and the aggregation job waits for all three arrays."""
    fake.max_array = 8
    result = submit_configs(configs(tmp_path, 20), fake)
    *arrays, aggregate = fake.submits
    assert [a["extra_args"] for a in arrays] == [["--array=0-7%1"], ["--array=0-7%1"],
                                                 ["--array=0-3%1"]]  # array_parallelism 2
    assert [a["script_args"] for a in arrays] == [[], ["8"], ["16"]]
    assert [a["dependency"] for a in arrays] == [None, None, f"afterany:{arrays[0]['id']}"]
    assert aggregate["dependency"] == "afterany:" + ":".join(a["id"] for a in arrays)
    assert result.job_ids == (*(a["id"] for a in arrays), aggregate["id"])
    assert result.roles == ("main", "main", "main", "aggregate")
    jobs = read_jobs(result.run_dir)
    assert [jobs.current(m).scheduler_id(m) for m in (0, 7, 8, 19)] == [
        f"{arrays[0]['id']}_0", f"{arrays[0]['id']}_7", f"{arrays[1]['id']}_0",
        f"{arrays[2]['id']}_3"]
    for i in range(20):
        (result.run_dir / "models" / f"model-{i:02d}" / "job.sh").write_text(
            f"echo ran model-{i:02d}\n")
    dispatcher = str(result.run_dir / "sweep.sbatch")

    def element(index: int, *args: str) -> subprocess.CompletedProcess[str]:
        env = {"PATH": os.environ["PATH"], "SLURM_ARRAY_TASK_ID": str(index)}
        return subprocess.run(["bash", dispatcher, *args], env=env, capture_output=True,
                              text=True, check=False, timeout=30)

    assert element(3, "16").stdout == "ran model-19\n"
    assert element(0, "8").stdout == "ran model-08\n"
    assert element(5).stdout == "ran model-05\n"
    bad = element(4, "16")
    assert bad.returncode == 2 and "array element '4' (model 20) is not one of 0-19" in bad.stderr
    assert element(0, "x").returncode == 2


def test_sweep_without_aggregation(tmp_path: Path, fake: FakeSlurm) -> None:
    submit_configs(configs(tmp_path, 3), fake, aggregate=False)
    assert len(fake.submits) == 1


def test_every_element_header_matches_the_dispatcher(tmp_path: Path) -> None:
    run = prepare_run(configs(tmp_path, 3), invocation_id="inv")
    head = [line for line in run.scripts["sweep.sbatch"].splitlines()
            if line.startswith("#SBATCH") and "--array" not in line and "--output" not in line
            and "--error" not in line and "--job-name" not in line]
    for name, text in run.scripts.items():
        if name.endswith("job.sh"):
            for line in head:
                assert line in text, (name, line)


def test_a_model_needing_another_header_is_refused(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    runs = configs(tmp_path, 2)
    spec = runs[1].spec
    changed = dataclasses.replace(spec, execution=dataclasses.replace(spec.execution, nodes=2))
    runs[1] = dataclasses.replace(runs[1], spec=changed)
    with pytest.raises(ConfigError, match="one array job has one header"):
        prepare_run(runs)


def test_dry_run_writes_and_submits_nothing(tmp_path: Path) -> None:
    run_file = write_run_file(tmp_path, 2)
    result = CliRunner().invoke(cli, ["submit", str(run_file), "--profile", "local-dev",
                                      "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "sweep.sbatch (dry run" in result.output and "models/model-01/job.sh" in result.output
    assert not (tmp_path / "out").exists()


def test_render_shows_dispatcher_elements_and_aggregation(tmp_path: Path) -> None:
    run_file = write_run_file(tmp_path, 2)
    result = CliRunner().invoke(cli, ["render", str(run_file), "--profile", "local-dev"])
    assert result.exit_code == 0, result.output
    names = [line for line in result.output.splitlines() if line.startswith("# =====")]
    assert names == ["# ===== sweep.sbatch =====", "# ===== models/model-00/job.sh =====",
                     "# ===== models/model-01/job.sh =====", "# ===== aggregate.sbatch ====="]


def test_concurrent_submits_in_threads_lose_nothing(tmp_path: Path) -> None:
    fake = FakeSlurm()
    runs = configs(tmp_path)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: submit_configs(runs, fake), range(16)))
    assert len({r.invocation_id for r in results}) == 16
    assert len(read_registry(tmp_path / "out")) == 16
    assert len(list_runs()) == 16


FAKE_SBATCH = """#!/bin/bash
# stands in for sbatch: a job id from a counter under flock, like slurmctld's
exec 9>>"$FAKE_SLURM_DIR/lock"
flock 9
n=$(( $(cat "$FAKE_SLURM_DIR/next" 2>/dev/null || echo 500) + 1 ))
echo "$n" > "$FAKE_SLURM_DIR/next"
echo "$n $*" >> "$FAKE_SLURM_DIR/calls"
echo "$n"
"""


def test_eight_concurrent_submit_processes_lose_or_corrupt_nothing(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(FAKE_SBATCH)
    (bin_dir / "sbatch").chmod(0o755)
    run_file = write_run_file(tmp_path, 2)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "FAKE_SLURM_DIR": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-m", "hpceval", "submit", str(run_file),
                               "--profile", "local-dev"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(8)]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    registry = read_registry(tmp_path / "out")
    assert len(registry) == 8
    assert len({e["invocation_id"] for e in registry}) == 8
    calls = (tmp_path / "calls").read_text().splitlines()
    assert len(calls) == 16  # per submit: one array sbatch + one aggregation sbatch
    for entry in registry:
        run_dir = Path(entry["run_dir"])
        manifest = json.loads((run_dir / "run.json").read_text())
        assert manifest["invocation_id"] == entry["invocation_id"]
        assert read_jobs(run_dir).ids == entry["jobs"]
        for key in ("model-00", "model-01"):
            assert (run_dir / "models" / key / "job.sh").read_text().startswith("#!/bin/bash")
        assert str(run_dir) in (run_dir / "sweep.sbatch").read_text()
    listed = {r.invocation_id for r in list_runs()}
    assert listed == {e["invocation_id"] for e in registry}
