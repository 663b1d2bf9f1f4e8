"""Layering, overrides, profile discovery and provenance."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpceval.config import ConfigError, load_config
from hpceval.config.profiles import list_profiles
from tests.config.conftest import write

RUN = """defaults:
  - execution: local-dev
  - deployment: command
execution:
  output_dir: /shared/runs
deployment:
  command: python -m tiny_server --port $PORT
  served_model_name: tiny
evaluation:
  params: {limit_samples: 10, temperature: 0.0}
  tasks:
    - ifeval
    - name: gsm8k
      params: {num_fewshot: 5}
"""


@pytest.fixture
def run_file(tmp_path: Path) -> Path:
    return write(tmp_path / "runs" / "run.yaml", RUN)


def test_layers_in_order_with_sources(run_file: Path) -> None:
    r = load_config(run_file, ["execution.nodes=2"])
    ex = r.spec.execution
    assert (ex.partition, ex.nodes, ex.output_dir) == ("debug", 2, "/shared/runs")
    src = r.composed.source_of
    assert src("execution.partition") == "profile local-dev"
    assert src("deployment.health_timeout") == "preset command"
    assert src("execution.output_dir") == "run file"
    assert src("execution.nodes") == "-o execution.nodes=2"
    assert src("execution.qos") == "default"


def test_task_params_merge_over_shared_params(run_file: Path) -> None:
    r = load_config(run_file, ["evaluation.tasks.gsm8k.params.limit_samples=3"])
    ifeval, gsm8k = r.spec.evaluation.tasks
    assert (ifeval.params.limit_samples, ifeval.params.num_fewshot) == (10, None)
    assert (gsm8k.params.limit_samples, gsm8k.params.num_fewshot) == (3, 5)
    assert gsm8k.params.temperature == 0.0


def test_whole_list_override_and_shorthand(run_file: Path) -> None:
    r = load_config(run_file, ["evaluation.tasks=[{name: mmlu}, humaneval]"])
    assert [t.name for t in r.spec.evaluation.tasks] == ["mmlu", "humaneval"]


def test_add_and_remove_keys(run_file: Path) -> None:
    r = load_config(run_file, ["+execution.sbatch_extra_flags.mail-type=FAIL",
                               "~execution.cpus_per_task"])
    assert r.spec.execution.sbatch_extra_flags == {"mail-type": "FAIL"}
    assert r.spec.execution.cpus_per_task is None


def test_override_of_unknown_task_names_the_tasks(run_file: Path) -> None:
    with pytest.raises(ConfigError, match=r"no task named 'mmlu'.*ifeval, gsm8k"):
        load_config(run_file, ["evaluation.tasks.mmlu.params.limit_samples=1"])


def test_dotted_task_name_addressed_by_longest_match(tmp_path: Path) -> None:
    run = write(tmp_path / "r.yaml", RUN.replace("- ifeval", "- lm-evaluation-harness.ifeval"))
    r = load_config(run, ["evaluation.tasks.lm-evaluation-harness.ifeval.timeout=60"])
    assert r.spec.evaluation.tasks[0].timeout == 60


def test_override_value_is_yaml(run_file: Path) -> None:
    r = load_config(run_file, ["execution.modules=[cuda/12.4, apptainer]",
                               "execution.exclusive=true"])
    assert r.spec.execution.modules == ["cuda/12.4", "apptainer"]
    assert r.spec.execution.exclusive is True


def test_a_profile_next_to_the_run_file_counts_only_for_a_name_found_nowhere_else(
        run_file: Path) -> None:
    """Review F2: the run file's folder was searched first, so a file there (a shared folder)
    won over the shipped, the user's and $HPCEVAL_PROFILE_PATH's profiles."""
    write(run_file.parent / "local-dev.yaml", "execution:\n  partition: mine\n")
    resolved = load_config(run_file)
    assert resolved.spec.execution.partition == "debug"  # the shipped local-dev
    assert resolved.composed.source_of("execution.partition").startswith("profile local-dev")
    write(run_file.parent / "nearby.yaml", "extends: local-dev\nexecution:\n  partition: mine\n")
    assert load_config(run_file, profile="nearby").spec.execution.partition == "mine"


def test_run_file_is_never_its_own_profile(tmp_path: Path) -> None:
    run = write(tmp_path / "local.yaml", RUN.replace("execution: local-dev", "execution: local"))
    r = load_config(run)
    assert r.spec.execution.type == "local"
    assert r.composed.source_of("execution.type").startswith("profile local")


def test_profile_search_path_order(tmp_path: Path, run_file: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    env_dir = tmp_path / "envprofiles"
    user_dir = tmp_path / "home" / ".config" / "hpceval" / "profiles"
    write(user_dir / "mysite.yaml", "description: user copy\npartition: from-user\n")
    monkeypatch.setenv("HPCEVAL_PROFILE_PATH", str(env_dir))
    assert load_config(run_file, profile="mysite").spec.execution.partition == "from-user"
    write(env_dir / "mysite.yaml", "description: env copy\npartition: from-env\n")
    assert load_config(run_file, profile="mysite").spec.execution.partition == "from-env"
    listed = {p.name: p for p in list_profiles()}
    assert listed["mysite"].source == "HPCEVAL_PROFILE_PATH"
    assert listed["mysite"].shadows == (user_dir / "mysite.yaml",)
    assert listed["local-dev"].source == "shipped"


def test_profile_extends_chain_and_loop(tmp_path: Path, run_file: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPCEVAL_PROFILE_PATH", str(tmp_path / "p"))
    write(tmp_path / "p" / "child.yaml", "extends: local-dev\nexecution:\n  qos: high\n")
    r = load_config(run_file, profile="child")
    assert (r.spec.execution.qos, r.spec.execution.partition) == ("high", "debug")
    write(tmp_path / "p" / "a.yaml", "extends: b\n")
    write(tmp_path / "p" / "b.yaml", "extends: a\n")
    with pytest.raises(ConfigError, match="loop: a -> b -> a"):
        load_config(run_file, profile="a")


def test_paths_expand_home_and_variables(run_file: Path, tmp_path: Path) -> None:
    r = load_config(run_file, ["execution.output_dir=$SCRATCH/runs",
                               "execution.hf_cache_dir=~/hf"])
    assert r.spec.execution.output_dir == "/scratch/alice/runs"
    assert r.spec.execution.hf_cache_dir == str(tmp_path / "home" / "hf")


def test_every_error_is_reported_at_once(run_file: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(run_file, ["execution.nodes=x", "deployment.port=1"])
    assert {i.path for i in info.value.issues} == {"execution.nodes", "deployment.port"}


def test_secret_is_checked_by_name_only(run_file: Path) -> None:
    ov = ["target.api_endpoint.api_key_name=MY_KEY"]
    with pytest.raises(ConfigError, match=r"\$MY_KEY is not set"):
        load_config(run_file, ov, environ={})
    r = load_config(run_file, ov, environ={"MY_KEY": "s3cret"})
    assert "s3cret" not in repr(r.spec)
    assert load_config(run_file, ov, check_environment=False).spec  # render elsewhere
