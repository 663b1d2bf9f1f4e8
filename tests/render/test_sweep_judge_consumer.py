"""The sweep-scope judge, job side: a sweep element waits for the judge job's files and trusts
only its own user's plain files. The rendered wait_for_sweep_judge function runs in bash
against files written here, as the judge job (branch judge-sweep) writes them:
<run dir>/auxiliary/<name>/endpoint.json ({"urls": [...], "model_id": ..., "job_id": ...}),
its token (mode 0600), and a job-failure file if that job failed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from render_helpers import RenderFn
from test_job_trust import function

from hpceval.contract import AUX_ENDPOINT_FILE, AUX_TOKEN_FILE, JOB_FAILURE_FILE

SWEEP_RUN: dict[str, Any] = {
    "deployment": {"type": "vllm", "checkpoint_path": "/m", "served_model_name": "m",
                   "runtime": "host"},
    "models": ["/models/a", "/models/b"],
    "auxiliary_deployments": {"judge": {
        "type": "vllm", "checkpoint_path": "/j", "served_model_name": "j", "runtime": "host",
        "scope": "sweep", "health_timeout": 10}},
    "evaluation": {"tasks": [{"name": "judged", "params": {"extra": {
        "judge_url": "auxiliary_deployments.judge.chat_url"}}}]}}


@pytest.fixture
def wait_code(render: RenderFn) -> str:
    script = render("local-dev", SWEEP_RUN)
    assert "wait_for_sweep_judge judge \"$RUN_DIR\"/auxiliary/judge 10 " \
           "HPCEVAL_AUX_JUDGE_TOKEN || exit 1" in script
    # the element serves no judge of its own: the model's servers on the model's nodes only
    assert "auxiliary/judge/server" not in script and "#SBATCH --nodes=1 " in script
    assert "aux_judge_server_environment" not in script
    return function(script, "wait_for_sweep_judge")


def run_wait(code: str, judge_dir: Path, limit: int = 10) -> subprocess.CompletedProcess[str]:
    body = f"""
log() {{ echo "log: $*"; }}
job_failure() {{ echo "job_failure: $*"; }}
STOPPING=0 HPCEVAL_PYTHON={sys.executable}
{code}
wait_for_sweep_judge judge {judge_dir} {limit} TOKEN || exit 1
printf 'url=%s\\n' "${{SWEEP_JUDGE_URLS[@]}}"
echo "token=$TOKEN"
env | grep -c '^TOKEN=' || true
"""
    return subprocess.run(["bash", "-c", body], capture_output=True, text=True, timeout=60,
                          check=False, env={"PATH": "/usr/bin:/bin"})


def write_judge(judge_dir: Path, urls: list[str], *, mode: int = 0o600) -> None:
    judge_dir.mkdir(parents=True, exist_ok=True)
    token = judge_dir / AUX_TOKEN_FILE
    token.write_text("s3cret-token\n")
    token.chmod(mode)
    (judge_dir / AUX_ENDPOINT_FILE).write_text(json.dumps(
        {"urls": urls, "model_id": "j", "job_id": "77"}))


def test_trusted_files_give_the_urls_and_the_token(wait_code: str, tmp_path: Path) -> None:
    write_judge(tmp_path / "judge", ["http://node3:8010", "http://node4:8010"])
    out = run_wait(wait_code, tmp_path / "judge")
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert "url=http://node3:8010" in lines and "url=http://node4:8010" in lines
    assert "token=s3cret-token" in lines
    assert lines[-1] == "0", "the token was exported"


def test_it_waits_for_the_judge_job_to_write_them(wait_code: str, tmp_path: Path) -> None:
    started = time.monotonic()
    writer = subprocess.Popen([sys.executable, "-c", (
        "import json, os, sys, time; time.sleep(3); d = sys.argv[1]; os.makedirs(d); "
        f"t = os.path.join(d, {AUX_TOKEN_FILE!r}); open(t, 'w').write('tok'); "
        "os.chmod(t, 0o600); "
        f"open(os.path.join(d, {AUX_ENDPOINT_FILE!r}), 'w').write(json.dumps("
        "{'urls': ['http://n1:9000']}))"), str(tmp_path / "judge")])
    try:
        out = run_wait(wait_code, tmp_path / "judge", limit=30)
    finally:
        writer.wait()
    assert out.returncode == 0 and "url=http://n1:9000" in out.stdout, out.stdout
    assert time.monotonic() - started >= 3


@pytest.mark.parametrize(("case", "says"), [
    ("failure", "the sweep's judge job for judge failed: judge server exited (log: x)"),
    ("timeout", "the sweep's judge judge was not ready after 2 s (raise "
                "auxiliary_deployments.judge.health_timeout"),
    ("symlink", "endpoint.json is a symbolic link: not trusted"),
    ("world-readable token", "token is readable by other users (mode 644"),
    ("group-writable record", "endpoint.json is writable by other users (mode 620"),
    ("bad url", "holds a URL that is not http://host:port"),
    ("no url", "names no instance URL"),
    ("other owner", "endpoint.json is owned by nobody (uid 65534), not by you"),
])
def test_untrusted_or_failed_judge_fails_the_element(wait_code: str, tmp_path: Path, case: str,
                                                     says: str) -> None:
    judge_dir = tmp_path / "judge"
    if case == "failure":
        judge_dir.mkdir()
        (judge_dir / JOB_FAILURE_FILE).write_text("judge server exited (log: x)\n")
    elif case == "symlink":
        write_judge(tmp_path / "elsewhere", ["http://n:1"])
        judge_dir.mkdir()
        (judge_dir / AUX_TOKEN_FILE).write_text("t")
        (judge_dir / AUX_TOKEN_FILE).chmod(0o600)
        (judge_dir / AUX_ENDPOINT_FILE).symlink_to(tmp_path / "elsewhere" / AUX_ENDPOINT_FILE)
    elif case == "world-readable token":
        write_judge(judge_dir, ["http://n:1"], mode=0o644)
    elif case == "group-writable record":
        write_judge(judge_dir, ["http://n:1"])
        (judge_dir / AUX_ENDPOINT_FILE).chmod(0o620)
    elif case == "bad url":
        write_judge(judge_dir, ["http://n:1; rm -rf ~"])
    elif case == "no url":
        write_judge(judge_dir, [])
    elif case == "other owner":
        if os.geteuid() != 0:
            pytest.skip("making a file another user owns needs root")
        write_judge(judge_dir, ["http://n:1"])
        os.chown(judge_dir / AUX_ENDPOINT_FILE, 65534, 65534)
    started = time.monotonic()
    out = run_wait(wait_code, judge_dir, limit=2)
    assert out.returncode == 1, out.stdout
    [failure] = [line for line in out.stdout.splitlines() if line.startswith("job_failure: ")]
    assert says in failure, out.stdout
    assert "token=" not in out.stdout
    if case == "failure":
        assert time.monotonic() - started < 2  # at once, not at the timeout
