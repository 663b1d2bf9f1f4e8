"""Secrets read from files (hpc-admin-2 N14): env values `file:PATH`.

A key exported to sbatch stays in slurmctld's job state and, where the site stores job
environments, in slurmdbd (the real job in tests/integration/test_secret_scan.py shows both
sides with `sacct --env-vars`). A `file:` value is read by the job itself: checked when the run
is loaded (absolute, a regular file of the user's, closed to everyone else), then again by the
job on the file it opened, read once into a variable of the script's own, and exported only
where its env_vars entry puts it.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from render_helpers import RenderFn
from test_job_trust import function

from hpceval.config import load_config
from hpceval.config.errors import ConfigError
from hpceval.config.secret_files import secret_var

SECRET = "s3cr3t/value+with=chars"


def key_file(tmp_path: Path, mode: int = 0o600, name: str = "api.key") -> Path:
    path = tmp_path / name
    path.write_text(SECRET + "\nsecond line, never read\n")
    path.chmod(mode)
    return path


def run(key: str, **extra: Any) -> dict[str, Any]:
    return {"deployment": {"type": "vllm", "checkpoint_path": "/models/m",
                           "served_model_name": "m", "env_vars": {"SERVER_TOKEN": key}},
            "target": {"api_endpoint": {"api_key_name": "MY_API_KEY"}},
            "execution": {"env_vars": {"MY_API_KEY": key}},
            "evaluation": {"tasks": [{"name": "boxed_chat", "env_vars": {"HF_TOKEN": key}}]},
            **extra}


def load(tmp_path: Path, config: dict[str, Any]) -> Any:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return load_config(path, [], profile="slurm", check_environment=True)


def refusal(tmp_path: Path, config: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as err:
        load(tmp_path, config)
    return str(err.value)


def test_a_private_file_of_ones_own_is_taken_without_the_variable_in_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MY_API_KEY", raising=False)
    resolved = load(tmp_path, run(f"file:{key_file(tmp_path)}"))
    assert resolved.spec.execution.env_vars["MY_API_KEY"].startswith("file:")


@pytest.mark.parametrize(("mode", "said"), [(0o644, "chmod 600"), (0o620, "chmod 600")])
def test_a_file_others_can_read_or_write_is_refused_with_the_fix(
        tmp_path: Path, mode: int, said: str) -> None:
    path = key_file(tmp_path, mode)
    text = refusal(tmp_path, run(f"file:{path}"))
    for where in ("execution.env_vars.MY_API_KEY", "deployment.env_vars.SERVER_TOKEN",
                  "evaluation.tasks.boxed_chat.env_vars.HF_TOKEN"):
        assert where in text, text
    assert f"{said} {path}" in text and SECRET not in text


def test_a_relative_missing_or_foreign_file_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert "is not an absolute path" in refusal(tmp_path, run("file:keys/api.key"))
    assert "cannot be opened (No such file or directory)" in refusal(
        tmp_path, run(f"file:{tmp_path / 'none'}"))
    path = key_file(tmp_path)
    someone_else = os.stat(path).st_uid + 1
    monkeypatch.setattr(os, "getuid", lambda: someone_else)
    monkeypatch.setattr(os, "geteuid", lambda: someone_else)
    assert "not by you" in refusal(tmp_path, run(f"file:{path}"))


def test_the_job_reads_each_file_once_and_passes_the_value_by_its_own_variable(
        render: RenderFn, tmp_path: Path) -> None:
    path = key_file(tmp_path)
    script = render("slurm", run(f"file:{path}"))
    var = secret_var(str(path))
    assert re.findall(r"^read_secret (\S+) (\S+)$", script, re.M) == [(var, str(path))]
    assert f'export MY_API_KEY="${{{var}}}"' in script  # execution.env_vars: the whole job
    for name in ("SERVER_TOKEN", "HF_TOKEN"):  # (the server's in Apptainer: its prefix)
        assert re.search(rf'export (APPTAINERENV_)?{name}="\$\{{{var}\}}"', script), name
    # the names are not asked of the submitting environment, nor by `hpceval resume`
    assert "${MY_API_KEY:?" not in script and "${HF_TOKEN:?" not in script
    assert f"export {var}" not in script  # the script's own variable is never exported


def read_secret(script: str, path: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    code = (function(script, "read_secret") + "\nlog() { echo \"log: $*\"; }\n"
            "job_failure() { echo \"failure: $*\"; }\n"
            f"read_secret V '{path}'\nprintf 'read=%s|' \"$V\"\nenv | grep -c '^V=' || true\n")
    return subprocess.run(["bash", "-c", code], capture_output=True, text=True, timeout=60,
                          check=False, env={"PATH": "/usr/bin:/bin"}, cwd=tmp_path)


def test_the_job_checks_the_file_it_opened_and_stops_on_a_shared_one(
        render: RenderFn, tmp_path: Path) -> None:
    path = key_file(tmp_path)
    script = render("slurm", run(f"file:{path}"))
    good = read_secret(script, path, tmp_path)
    assert (good.returncode, good.stdout) == (0, f"read={SECRET}|0\n"), good  # first line only
    # the file became readable by others after the submit: the job stops before anything runs
    path.chmod(0o640)
    shared = read_secret(script, path, tmp_path)
    assert shared.returncode == 1 and "read=" not in shared.stdout, shared
    assert f"failure: the secret file {path} must be yours and private: chmod 600" in shared.stdout
    missing = read_secret(script, tmp_path / "gone", tmp_path)
    assert missing.returncode == 1 and "cannot open the secret file" in missing.stdout, missing
