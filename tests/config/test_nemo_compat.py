"""NeMo Evaluator launcher files are accepted where the meaning carries over."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpceval.config import ConfigError, load_config
from tests.config.conftest import write

LAUNCHER_FILE = """defaults:
  - execution: slurm/default
  - deployment: vllm
  - _self_
execution:
  hostname: login.example.invalid
  username: alice
  account: proj1
  output_dir: /lustre/alice/results
  num_nodes: 2
  gres: gpu:8
  walltime: "02:00:00"
  mounts:
    deployment: {/lustre/models: /models}
    evaluation: {/lustre/data: /datasets}
    mount_home: false
  env_vars:
    evaluation: {HF_TOKEN: host:HF_TOKEN}
deployment:
  checkpoint_path: /lustre/models/llama
  served_model_name: llama
  tensor_parallel_size: 8
  extra_args: --max-num-seqs 64 --enforce-eager
  endpoints: {chat: /v1/chat/completions, health: /health}
target:
  api_endpoint:
    api_key: sk-do-not-store
evaluation:
  nemo_evaluator_config:
    config:
      params:
        parallelism: 32
        request_timeout: 3600
  tasks:
    - name: ifeval
    - name: gpqa_diamond
      env_vars: {HF_TOKEN: host:HF_TOKEN}
      nemo_evaluator_config:
        config:
          params:
            limit_samples: 50
            extra: {n_samples: 3}
"""


def test_launcher_file_runs_with_clear_notes(tmp_path: Path) -> None:
    run = write(tmp_path / "nel.yaml", LAUNCHER_FILE)
    r = load_config(run, ["execution.hostname=login.example.invalid"], check_environment=False)
    ex, dep = r.spec.execution, r.spec.deployment
    assert ex.profile == "slurm/default" and ex.nodes == 2
    assert (ex.gpu_request, ex.gpus_per_node) == ("gres", 8)
    assert ex.extra_binds == ["/lustre/models:/models", "/lustre/data:/datasets"]
    assert r.spec.evaluation.env_vars == {"HF_TOKEN": "host:HF_TOKEN"}
    assert dep.extra_args == ["--max-num-seqs", "64", "--enforce-eager"]
    assert r.layout.instances == 2
    ifeval, gpqa = r.spec.evaluation.tasks
    assert (ifeval.params.parallelism, ifeval.params.request_timeout) == (32, 3600)
    assert (gpqa.params.limit_samples, gpqa.params.extra) == (50, {"n_samples": 3})
    notes = "\n".join(r.composed.notes)
    assert ex.hostname == "login.example.invalid"
    assert "api_key is ignored" in notes and "sk-do-not-store" not in notes
    assert "execution.username is ignored" in notes


def test_launcher_override_names_are_translated(tmp_path: Path) -> None:
    run = write(tmp_path / "nel.yaml", LAUNCHER_FILE)
    r = load_config(run, ["execution.num_nodes=1", "execution.hostname=localhost"],
                    environ={"HF_TOKEN": "x"})
    assert r.spec.execution.nodes == 1


def test_hostname_means_the_machine_that_submits(tmp_path: Path) -> None:
    import socket

    run = write(tmp_path / "nel.yaml", LAUNCHER_FILE)
    with pytest.raises(ConfigError, match=r"execution.hostname: names 'login.example.invalid', "
                       r"which is not this machine.*run hpceval on login.example.invalid"):
        load_config(run, environ={"HF_TOKEN": "x"})
    here = socket.gethostname()
    r = load_config(run, [f"-o execution.hostname={here}"[3:]], environ={"HF_TOKEN": "x"})
    assert r.spec.execution.hostname == here
