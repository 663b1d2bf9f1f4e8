"""The command tree: fast help, honest not-built commands, completion, profiles listing."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from click.testing import CliRunner

from hpceval.cli.main import COMMANDS, cli


def _modules_after(args: list[str]) -> set[str]:
    code = ("import sys, runpy; sys.argv = ['hpceval', *sys.argv[1:]]\n"
            "try:\n    runpy.run_module('hpceval', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "print('\\n'.join(sys.modules), file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                         check=True)
    return set(out.stderr.split())


def test_help_imports_no_heavy_module() -> None:
    loaded = _modules_after(["--help"])
    for heavy in ("pandas", "submitit", "jinja2", "yaml", "numpy", "torch", "vllm"):
        assert heavy not in loaded, f"hpceval --help imported {heavy}"


def test_help_lists_the_whole_command_tree() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    for name in ("submit", "run", "render", "status", "info", "logs", "kill", "resume", "ls",
                 "results", "export", "stage", "config"):
        assert f"  {name} " in result.output


def test_run_is_an_alias_of_submit() -> None:
    assert COMMANDS["run"][:2] == COMMANDS["submit"][:2]


def test_bash_completion_lists_subcommands() -> None:
    env = {**os.environ, "_HPCEVAL_COMPLETE": "bash_complete", "COMP_WORDS": "hpceval st",
           "COMP_CWORD": "1"}
    out = subprocess.run([sys.executable, "-m", "hpceval"], env=env, capture_output=True,
                         text=True)
    assert "status" in out.stdout and "stage" in out.stdout and "submit" not in out.stdout


def test_ls_profiles_json_names_sources() -> None:
    result = CliRunner().invoke(cli, ["ls", "profiles", "--json"])
    assert result.exit_code == 0
    listed = {p["name"]: p for p in json.loads(result.output)}
    assert listed["local-dev"]["source"] == "shipped"
    assert "dev cluster" in listed["local-dev"]["description"]


def test_config_show_prints_every_model_of_a_sweep() -> None:
    result = CliRunner().invoke(cli, [
        "config", "show", "--profile", "local-dev", "-o", "execution.output_dir=/runs",
        "-o", "evaluation.tasks=[ifeval]", "-o", "deployment.type=command",
        "-o", "deployment.command=srv", "-o", "deployment.runtime=host",
        "-o", "+models=[{name: a}, {name: b}]"])
    assert result.exit_code == 0, result.output
    assert "model 1 of 2: a" in result.output and "model 2 of 2: b" in result.output
    assert "served_model_name: b" in result.output
