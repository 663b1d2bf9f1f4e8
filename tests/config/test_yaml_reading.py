"""How run files and ``-o`` values are read: YAML 1.2 numbers, no base-60, bounded input."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from hpceval.cli.main import cli
from hpceval.config import ConfigError, load_config
from tests.config.conftest import write

RUN = """defaults:
  - execution: slurm
  - deployment: none
execution:
  output_dir: /shared/runs
  max_walltime: "240:00:00"
target:
  api_endpoint: {url: "http://h:8000/v1/chat/completions", model_id: m}
evaluation:
  tasks: [ifeval]
"""


def _render(tmp_path: Path, text: str, *overrides: str) -> tuple[int, str]:
    run = write(tmp_path / "run.yaml", text)
    args = ["render", str(run)]
    for o in overrides:
        args += ["-o", o]
    result = CliRunner().invoke(cli, args)
    return result.exit_code, result.output


@pytest.mark.parametrize("how", ["override", "file"])
def test_walltime_is_never_a_base60_number(tmp_path: Path, how: str) -> None:
    # YAML 1.1 reads 1:00:00 as 3600, which Slurm would take as 3600 minutes (60 hours).
    if how == "override":
        code, out = _render(tmp_path, RUN, "execution.walltime=1:00:00")
    else:
        text = RUN.replace("output_dir:", "walltime: 1:00:00\n  output_dir:")
        code, out = _render(tmp_path, text)
    assert code == 0, out
    assert "#SBATCH --time=01:00:00" in out and "3600" not in out.split("--time=")[1][:10]


def test_exponent_floats_are_numbers(tmp_path: Path) -> None:
    run = write(tmp_path / "run.yaml", RUN + "  params: {top_p: 1e-5, temperature: 1E0}\n")
    r = load_config(run, ["evaluation.params.max_new_tokens=4096"], check_environment=False)
    assert r.spec.evaluation.params.top_p == pytest.approx(1e-5)
    assert r.spec.evaluation.params.temperature == 1.0
    r = load_config(run, ["evaluation.params.top_p=5e-1"], check_environment=False)
    assert r.spec.evaluation.params.top_p == 0.5


def test_dates_and_times_stay_text(tmp_path: Path) -> None:
    run = write(tmp_path / "run.yaml", RUN + "  env_vars: {SNAPSHOT: 2026-01-01}\n")
    r = load_config(run, check_environment=False)
    assert r.spec.evaluation.env_vars == {"SNAPSHOT": "2026-01-01"}


def test_duplicate_keys_are_refused_with_their_lines(tmp_path: Path) -> None:
    run = write(tmp_path / "run.yaml", RUN + "  params: {parallelism: 4}\n  params: {}\n")
    with pytest.raises(ConfigError) as err:
        load_config(run, check_environment=False)
    text = str(err.value)
    assert "duplicate key 'params'" in text and "line 11" in text and "line 12" in text


def test_merge_keys_may_be_overridden(tmp_path: Path) -> None:
    text = RUN.replace("execution:\n", "execution:\n  <<: {nodes: 2, walltime: '01:00:00'}\n"
                       "  nodes: 1\n")
    r = load_config(write(tmp_path / "run.yaml", text), check_environment=False)
    assert (r.spec.execution.nodes, r.spec.execution.walltime) == (1, "01:00:00")


def test_non_utf8_bytes_exit_2_naming_the_line(tmp_path: Path) -> None:
    run = tmp_path / "run.yaml"
    run.write_bytes(RUN.encode() + b"# caf\xe9\n")
    result = CliRunner().invoke(cli, ["render", str(run)])
    assert result.exit_code == 2, result.output
    assert "not UTF-8" in result.output and "line 11" in result.output
    assert "save it as UTF-8 text" in result.output
    assert "Traceback" not in result.output


def test_alias_bomb_is_refused_fast(tmp_path: Path) -> None:
    # 9 levels of 9 aliases: about 400 million values, reached through a key that is read.
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i, name in enumerate("bcdefghi"):
        prev = "abcdefghi"[i]
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    bomb = "\n".join(lines) + "\n" + RUN + "  params: {extra: {x: *i}}\n"
    assert len(bomb) < 700
    run = write(tmp_path / "bomb.yaml", bomb)
    start = time.monotonic()
    result = CliRunner().invoke(cli, ["render", str(run)])
    assert time.monotonic() - start < 5
    assert result.exit_code == 2 and "expands to more than 100000 values" in result.output


def test_oversized_file_is_refused(tmp_path: Path) -> None:
    run = write(tmp_path / "big.yaml", RUN + "#" + "x" * (1 << 20) + "\n")
    with pytest.raises(ConfigError, match="larger than") as err:
        load_config(run, check_environment=False)
    # its fix is not about YAML syntax (shared-cluster-4 N9: "fix the YAML (indentation...)")
    assert "check that the path names the file you meant" in str(err.value)
    assert "indentation" not in str(err.value)


def test_hydra_add_forms_set_keys(tmp_path: Path) -> None:
    run = write(tmp_path / "run.yaml", RUN)
    r = load_config(run, ["++evaluation.params.limit_samples=10", "+execution.qos=high",
                          "+evaluation.params.extra.judge.url=http://j/v1"],
                    check_environment=False)
    assert r.spec.evaluation.params.limit_samples == 10
    assert r.spec.execution.qos == "high"
    assert r.spec.evaluation.params.extra == {"judge": {"url": "http://j/v1"}}
