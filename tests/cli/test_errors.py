"""One error base and one handler: every user-facing error is an HpcevalError (message, fix,
exit status), the CLI turns each into one message and its exit status in one place, and the
model-name rule is one property per direction on the spec."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import hpceval
from hpceval.cli import main as cli_main
from hpceval.config.schema import (
    ApiEndpointSpec,
    AuxiliaryDeploymentSpec,
    DeploymentSpec,
    EvaluationSpec,
    ExecutionSpec,
    RunSpec,
    TargetSpec,
)
from hpceval.errors import ConfigError, HpcevalError

PACKAGE = Path(hpceval.__file__).parent
# Errors of the in-job runtime that never reach a user's command: the proxy's answers to its
# clients (a 4xx/5xx, a retry), collect's (a task's state in its job log), the watch tick's
# retry signal, the judge hook inside lm-eval's own process, and the sweep judge's endpoint
# record as the element's job reads it (the job's log and the proxy's 503 say why); and
# hpceval.trust's refusal, a phrase every caller words into its own error (trust is a leaf
# module: it cannot import hpceval.errors).
IN_JOB = {"BodyError", "UpstreamConnectError", "UpstreamProtocolError", "UpstreamFailure",
          "UpstreamDisconnected", "ResultsAlreadyFinal", "NoResultsFound", "SubmitFailed",
          "JudgeError", "EndpointMissing", "EndpointUntrusted", "Untrusted", "Unread",
          "Skipped"}  # job.compile_cache: why a cache is not used, a line of the server log


def _modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages([str(PACKAGE)], "hpceval."):
        if ".lm_eval_tasks" in info.name or info.name.endswith("__main__"):
            continue
        names.append(info.name)
    return names


def test_every_user_facing_error_is_an_hpceval_error() -> None:
    found = {}
    for name in _modules():
        module = importlib.import_module(name)
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, BaseException) \
                    and value.__module__ == name:
                found[value.__name__] = value
    assert len(found) > 20  # the scan saw the package's errors
    outside = sorted(n for n, cls in found.items()
                     if not issubclass(cls, HpcevalError) and n not in IN_JOB)
    assert outside == []


def test_no_command_converts_an_error_by_hand() -> None:
    """`except SomeError: raise click.ClickException(str(exc))` is the handler's job now."""
    offenders = []
    for path in (PACKAGE / "cli").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ExceptHandler) and node.name and any(
                    isinstance(s, ast.Raise) and s.exc is not None
                    and ast.unparse(s.exc) == f"click.ClickException(str({node.name}))"
                    for s in node.body):
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []


@click.command()
@click.option("--code", type=int, default=1)
@click.option("--config", is_flag=True)
def boom(code: int, config: bool) -> None:
    if config:
        raise ConfigError.at("deployment.type", "is wrong", "fix it")
    raise HpcevalError("the thing broke", fix="do the other thing", exit_code=code)


@pytest.fixture
def with_boom(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(cli_main.COMMANDS, "boom", (__name__, "boom", "test command"))


@pytest.mark.usefixtures("with_boom")
@pytest.mark.parametrize("code", [1, 3])
def test_the_handler_prints_message_and_fix_and_exits_with_the_error_code(code: int) -> None:
    result = CliRunner().invoke(cli_main.cli, ["boom", "--code", str(code)])
    assert result.exit_code == code
    assert result.stderr.strip() == "Error: the thing broke (fix: do the other thing)"
    assert result.exception is None or isinstance(result.exception, SystemExit)


@pytest.mark.usefixtures("with_boom")
def test_config_errors_keep_their_own_lines_and_status() -> None:
    result = CliRunner().invoke(cli_main.cli, ["boom", "--config"])
    assert result.exit_code == 2
    assert result.stderr.strip() == "hpceval: config error: deployment.type: is wrong (fix: fix it)"


def test_a_library_error_reaches_the_user_through_the_handler(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli_main.cli, ["logs", "no-such-run", "--output-dir",
                                               str(tmp_path)])
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: ") and "no-such-run" in result.stderr


def _spec(served: str | None, model_id: str | None) -> RunSpec:
    return RunSpec(ExecutionSpec(output_dir="/o"), DeploymentSpec(served_model_name=served),
                   TargetSpec(ApiEndpointSpec(model_id=model_id)), EvaluationSpec(tasks=[]))


@pytest.mark.parametrize(("served", "model_id", "names"), [
    ("srv", "req", ("srv", "req")), ("srv", None, ("srv", "srv")),
    (None, "req", ("req", "req")), (None, None, (None, None))])
def test_the_model_name_rule_in_both_directions(served: str | None, model_id: str | None,
                                                names: tuple[str | None, str | None]) -> None:
    assert (_spec(served, model_id).served_name, _spec(served, model_id).request_model) == names
    aux = AuxiliaryDeploymentSpec(served_model_name=served, model_id=model_id)
    assert (aux.served_name, aux.request_model) == names
