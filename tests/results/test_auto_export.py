"""export.destinations (NEL's auto-export): a dependent export job after the run's main job,
that waits again for auto-resume successors, and exports what finished (idempotent)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.runs import finish_task, write_run_file
from support.slurm import FakeSlurm

from hpceval.config import ResolvedConfig, load_run
from hpceval.contract import EXPORT_SCRIPT, EXPORT_WAITED_FILE, SUCCESSORS_FILE
from hpceval.job import export as autoexport
from hpceval.runs.control import resume_run
from hpceval.runs.index import find_run
from hpceval.runs.jobs import read_jobs
from hpceval.runs.rundir import prepare_run
from hpceval.runs.submit import submit_configs

ONE, TWO = "ut-harness.ut_one", "ut-harness.ut_two"


def export_configs(tmp_path: Path, export: dict[str, Any], n_models: int = 1,
                   profile: str = "local-dev") -> list[ResolvedConfig]:
    path = write_run_file(tmp_path, n_models)
    run = yaml.safe_load(path.read_text())
    run["export"] = export
    path.write_text(yaml.safe_dump(run))
    return load_run(path, profile=profile, check_environment=False)


def test_the_export_job_waits_for_the_main_job(tmp_path: Path, fake: FakeSlurm) -> None:
    cfg = export_configs(tmp_path, {"destinations": ["local", "mlflow"],
                                    "mlflow": {"tracking_uri": "file:/shared/mlruns"}})
    result = submit_configs(cfg, fake)
    main, export = fake.submits
    assert export["script"] == result.run_dir / EXPORT_SCRIPT
    assert export["dependency"] == f"afterany:{main['id']}"
    assert [(e.id, e.role) for e in read_jobs(result.run_dir).chain] == [
        (main["id"], "main"), (export["id"], "export")]
    text = export["script"].read_text()
    run_dir = str(result.run_dir)
    assert f"--resubmit={run_dir}/{EXPORT_SCRIPT}" in text
    assert f"--local-dir={run_dir}/export" in text
    assert "--mlflow-tracking-uri=file:/shared/mlruns" in text
    assert "#SBATCH --cpus-per-task=1" in text and "--gpus" not in text
    assert subprocess.run(["bash", "-n", str(export["script"])], check=False).returncode == 0
    if shutil.which("shellcheck"):
        proc = subprocess.run(["shellcheck", str(export["script"])], capture_output=True,
                              text=True, check=False)
        assert proc.returncode == 0, proc.stdout


def test_no_destinations_no_export_job(tmp_path: Path, fake: FakeSlurm) -> None:
    result = submit_configs(export_configs(tmp_path, {"destinations": []}), fake)
    assert len(fake.submits) == 1 and not (result.run_dir / EXPORT_SCRIPT).exists()


def test_a_sweep_gets_aggregation_and_export_after_the_array(tmp_path: Path,
                                                             fake: FakeSlurm) -> None:
    submit_configs(export_configs(tmp_path, {"destinations": ["local"]}, n_models=3), fake)
    array, aggregate, export = fake.submits
    assert aggregate["dependency"] == export["dependency"] == f"afterany:{array['id']}"


def test_resume_submits_the_export_job_again(tmp_path: Path, fake: FakeSlurm) -> None:
    result = submit_configs(export_configs(tmp_path, {"destinations": ["local"]}), fake)
    fake.states[result.job_ids[0]] = "TIMEOUT"
    finish_task(result.run_dir, "solo", ONE)
    resume_run(find_run(result.invocation_id), fake)
    resubmit, export = fake.submits[2:]
    assert export["script"] == result.run_dir / EXPORT_SCRIPT
    assert export["dependency"] == f"afterany:{resubmit['id']}"


def test_the_local_runner_exports_after_the_last_model(tmp_path: Path) -> None:
    cfg = export_configs(tmp_path, {"destinations": ["local"], "local": {"format": "csv"}},
                         profile="local")
    run = prepare_run(cfg, invocation_id="inv-1", python="/py")
    assert run.export is None and EXPORT_SCRIPT not in run.scripts
    runner = run.scripts["local.sh"]
    assert (f"/py -m hpceval.job export --run-dir \"$RUN_DIR\" --dest=local "
            f"--local-dir={run.run_dir}/export --local-format=csv") in runner
    assert runner.index("hpceval.job export") > runner.index("done\n")


def test_export_waits_for_successors_once_each_then_exports(tmp_path: Path,
                                                            fake: FakeSlurm) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "models").mkdir(parents=True)
    (run_dir / "run.json").write_text(json.dumps({"invocation_id": "inv-1", "kind": "slurm",
                                                  "models": []}))
    finish_task(run_dir, "solo", ONE)
    script = run_dir / EXPORT_SCRIPT
    args = ["--run-dir", str(run_dir), "--resubmit", str(script), "--dest", "local",
            "--local-dir", str(tmp_path / "exp")]
    (run_dir / SUCCESSORS_FILE).write_text("2001 solo\n")

    def main() -> int:
        return autoexport.main_with(args, fake)

    assert main() == 0  # the main job's successor still runs: wait for it, export nothing
    assert fake.submits[-1]["dependency"] == "afterany:2001"
    assert fake.submits[-1]["script"] == script
    assert not (tmp_path / "exp").exists()
    assert (run_dir / EXPORT_WAITED_FILE).read_text() == "2001\n"
    # recorded in the run's chain (so `hpceval kill` stops it), not as a model's job
    (entry,) = [e for e in read_jobs(run_dir).chain if e.id == fake.submits[-1]["id"]]
    assert (entry.role, entry.models) == ("export", ())
    with (run_dir / SUCCESSORS_FILE).open("a") as fh:
        fh.write("2002 solo\n")  # that successor was stopped too and submitted another
    assert main() == 0
    assert fake.submits[-1]["dependency"] == "afterany:2002" and len(fake.submits) == 2
    finish_task(run_dir, "solo", TWO)
    assert main() == 0  # nothing left to wait for: export
    assert len(fake.submits) == 2
    (written,) = (tmp_path / "exp").iterdir()
    first = written.read_text()
    assert ONE in first and TWO in first
    assert main() == 0 and written.read_text() == first  # idempotent


def test_a_failed_destination_fails_the_job_and_says_how_to_retry(
        tmp_path: Path, fake: FakeSlurm, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    run_dir = tmp_path / "run"
    finish_task(run_dir, "solo", ONE)
    (run_dir / "run.json").write_text(json.dumps({"invocation_id": "inv-1", "models": []}))
    monkeypatch.setattr("importlib.import_module", _no_mlflow)
    code = autoexport.main_with(["--run-dir", str(run_dir), "--dest", "mlflow"], fake)
    assert code == 1
    assert f"retry: hpceval export {run_dir} --dest mlflow" in capsys.readouterr().err


def _no_mlflow(name: str, package: str | None = None) -> Any:
    raise ImportError(name)


@pytest.mark.parametrize(("export", "says"), [
    ({"destinations": ["local"], "local": {"output_dir": "exports"}},
     "export.local.output_dir: 'exports' is not an absolute path"),
    ({"destinations": ["mlflow"], "mlflow": {"tracking_uri": "http://u:pw@mlflow:5000"}},
     "export.mlflow.tracking_uri: carries a user:password@ part"),
    ({"destinations": ["gsheets"]}, "export.destinations"),
])
def test_bad_export_settings_are_config_errors(tmp_path: Path, export: dict[str, Any],
                                               says: str) -> None:
    from hpceval.config.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        export_configs(tmp_path, export)
    assert says in str(info.value)
