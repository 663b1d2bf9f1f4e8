"""Whole job scripts with hostile values in every string field that reaches the script body.

Values are put straight into the resolved spec (past the config layer's own checks), so the
renderer alone must keep them literal: the script stays valid bash, and running it hands each
value unchanged to the harness and to the server command line.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from render_helpers import resolve
from test_quoting import hostile

from hpceval.config import ConfigError, ResolvedConfig, with_tasks
from hpceval.render import JobContext, render_job
from hpceval.tasks import Catalogue

# A path component: no '/', not '.' or '..', short enough for a file name.
component = st.text(alphabet=st.characters(blacklist_categories=("Cs",),
                                           blacklist_characters="\x00/"),
                    min_size=1, max_size=20).filter(lambda s: s not in (".", ".."))
# Run directories and model keys end up in #SBATCH --output too: no control characters there
# (render_job refuses them, see test_header.py).
printable_component = component.filter(lambda s: s.isprintable())
SLOW = settings(max_examples=6, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def with_values(resolved: ResolvedConfig, **sections: dict[str, Any]) -> ResolvedConfig:
    spec = resolved.spec
    changes = {name: dataclasses.replace(getattr(spec, name), **values)
               for name, values in sections.items() if name != "api_endpoint"}
    if "api_endpoint" in sections:
        endpoint = dataclasses.replace(spec.target.api_endpoint, **sections["api_endpoint"])
        changes["target"] = dataclasses.replace(spec.target, api_endpoint=endpoint)
    return dataclasses.replace(resolved, spec=dataclasses.replace(spec, **changes))


@pytest.fixture
def vllm_dp(tmp_path: Path) -> ResolvedConfig:
    return resolve("slurm", {"deployment": {
        "type": "vllm", "checkpoint_path": "/m", "served_model_name": "m",
        "tensor_parallel_size": 2}, "evaluation": {"tasks": [
            {"name": "boxed_chat"}, {"name": "judged"}, {"name": "completion_probe"}]}},
        tmp_path, ["execution.nodes=2", "execution.hf_cache_dir=/hf", "execution.dataset_dir=/d"])


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(hostile, min_size=16, max_size=16), st.lists(hostile, max_size=3),
       st.lists(hostile.filter(bool), min_size=3, max_size=3), printable_component)
def test_hostile_values_render_to_valid_bash(vllm_dp: ResolvedConfig, catalogue: Catalogue,
                                             tmp_path: Path, v: list[str],
                                             extra_args: list[str], required: list[str],
                                             name: str) -> None:
    v[8], v[9], v[10] = required  # checkpoint, served model name, image: empty is refused
    # "lit:" keeps a value literal: "$NAME" alone means "pass $NAME through" in a config.
    tasks = [dataclasses.replace(t, env_vars={"E_TASK": "lit:" + v[0]},
                                 params=dataclasses.replace(t.params, extra={"a": v[1]}))
             for t in vllm_dp.spec.evaluation.tasks]
    resolved = with_values(
        vllm_dp,
        execution={"modules": [v[2]], "env_vars": {"E_EXEC": "lit:" + v[3]}, "hf_cache_dir": v[4],
                   "dataset_dir": v[5], "image_dir": v[6], "extra_binds": [v[7]]},
        deployment={"checkpoint_path": v[8], "served_model_name": v[9], "image": v[10],
                    "extra_args": extra_args, "env_vars": {"E_DEP": "lit:" + v[11]},
                    "health_path": v[12]},
        evaluation={"tasks": tasks, "env_vars": {"E_EVAL": "lit:" + v[13]}},
        api_endpoint={"model_id": v[14]})
    ctx = JobContext(f"/runs/{name}", v[15], name, v[4] or "python")
    binds = [v[4], v[5], v[8]]
    try:
        text = render_job(with_tasks(resolved, catalogue), ctx)
    except ConfigError as exc:
        # The only refusals: a container bind that cannot express the path, or a bad bind.
        assert any("," in p or ":" in p for p in binds) or "," in v[7] or not v[7].strip(), exc
        return
    script = tmp_path / "job.sbatch"
    script.write_text(text)
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr


def run_locally(script: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    return subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False,
                          env={**clean, **env}, timeout=120)


@SLOW
@given(st.lists(hostile, min_size=6, max_size=6), printable_component)
def test_harness_receives_every_value_unchanged(catalogue: Catalogue, tmp_path_factory: Any,
                                                v: list[str], name: str) -> None:
    tmp = tmp_path_factory.mktemp("echo")
    resolved = resolve("local-dev", {
        "execution": {"output_dir": str(tmp)},
        "deployment": {"type": "none"},
        # called directly, so the harness itself gets the (hostile) URL
        "target": {"api_endpoint": {"url": "http://127.0.0.1:9/v1/chat/completions",
                                    "model_id": "placeholder", "proxy": False}},
        # its command reads params.extra.a: loading refuses the run without it
        "evaluation": {"tasks": [{"name": "echo_values", "params": {"extra": {"a": "x"}}}]}},
        tmp)
    task = resolved.spec.evaluation.tasks[0]
    task = dataclasses.replace(task, env_vars={"E_TASK": "lit:" + v[0]},
                               params=dataclasses.replace(task.params, extra={"a": v[1]}))
    resolved = with_values(resolved, execution={"env_vars": {"E_EXEC": "lit:" + v[2]}},
                           evaluation={"tasks": [task], "env_vars": {"E_EVAL": "lit:" + v[3]}},
                           api_endpoint={"model_id": v[4], "url": v[5]})
    run_dir = tmp / name
    ctx = JobContext(str(run_dir), name, name, "/bin/true")  # collect: a no-op here
    script = tmp / "job.sbatch"
    script.write_text(render_job(with_tasks(resolved, catalogue), ctx))
    proc = run_locally(script, {})
    values = run_dir / "models" / name / "tasks" / "echoer.echo_values" / "harness" / "values.bin"
    assert values.exists(), proc.stdout + proc.stderr
    got = values.read_bytes().split(b"\0")[:-1]
    assert got == [x.encode() for x in (v[4], v[1], f"<{v[5]}>", v[2], v[3], v[0], v[4])]


@SLOW
@given(st.lists(hostile.filter(bool), min_size=2, max_size=2), hostile,
       st.lists(hostile, max_size=4))
def test_server_gets_its_command_line_unchanged(catalogue: Catalogue, tmp_path_factory: Any,
                                                v: list[str], health_path: str,
                                                extra_args: list[str]) -> None:
    tmp = tmp_path_factory.mktemp("serve")
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "vllm"  # records its argv, then fails like a server that cannot start
    fake.write_text("#!/bin/bash\nprintf '%s\\0' \"$@\" > \"$ARGV_OUT\"\necho 'no GPU here' >&2\n"
                    "exit 3\n")
    fake.chmod(0o755)
    resolved = resolve("local-dev", {
        "execution": {"output_dir": str(tmp)},
        "deployment": {"type": "vllm", "runtime": "host", "checkpoint_path": "/m",
                       "served_model_name": "m", "tensor_parallel_size": 4,
                       "health_timeout": 30},
        # the tasks start once the server serves: the job's Python is /bin/true, so a proxy
        # started beside the load (overlap_load) would fail before the server does
        "evaluation": {"tasks": [{"name": "completion_probe"}], "overlap_load": False}}, tmp)
    resolved = with_values(resolved, deployment={
        "checkpoint_path": v[0], "served_model_name": v[1], "health_path": health_path,
        "extra_args": extra_args})
    script = tmp / "job.sbatch"
    script.write_text(render_job(with_tasks(resolved, catalogue),
                                 JobContext(str(tmp / "run"), "i", "m", "/bin/true")))
    argv_out = tmp / "argv.bin"
    proc = run_locally(script, {"ARGV_OUT": str(argv_out),
                                "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert proc.returncode != 0
    got = argv_out.read_bytes().split(b"\0")[:-1]
    # vLLM from the host, one node: it listens on a socket in the job's own folder
    # (deployment.unix_socket), which the job removes when it ends
    socket = got[12].decode() if len(got) > 12 else ""
    assert re.fullmatch(r"/tmp/hpceval-[A-Za-z0-9]{8}/server-0\.sock", socket), got
    assert not Path(socket).parent.exists()
    expected = ["serve", v[0], "--served-model-name", v[1], "--tensor-parallel-size", "4",
                "--pipeline-parallel-size", "1", "--gpu-memory-utilization", "0.9",
                "--enable-tokenizer-info-endpoint", "--uds", socket, *extra_args]
    assert got == [a.encode() for a in expected]
    # The recorded launch command is the same argv, in a form bash reads back.
    cmd_file = tmp / "run" / "models" / "m" / "server" / "instance-0.cmd"
    decoded = subprocess.run(["bash", "-c", f'eval "a=($(cat {shlex.quote(str(cmd_file))}))"; '
                              "printf '%s\\0' \"${a[@]}\""], capture_output=True, check=True)
    assert decoded.stdout.split(b"\0")[:-1] == [a.encode() for a in ["vllm", *expected]]
    assert "exited with status 3" in proc.stdout and "no GPU here" in proc.stdout
