"""Hostile strings in every string-valued key of the schema, through `hpceval submit`.

The keys are found by walking the schema dataclasses, so a new field is covered without
editing this file. Each (key, payload) pair is submitted for real, with a strict fake sbatch
(tests/fakes/recording_sbatch) on PATH, and ends one of two ways:

(a) refused: exit 2, every error line names the key (a newline in a value never splits the
    message), nothing written under the output folder, sbatch never called; or
(b) accepted: each written script passes `bash -n`; every place the payload's shell fragment
    lands is inside single quotes or a comment (a small bash quoting scanner says where), and
    running those quoted parts and the variable assignments holding them in bash creates no
    sentinel file; the #SBATCH header keeps one word per line and no repeated flags; Jinja
    text in a value is never evaluated.

A refusal by submit is also rendered with `hpceval render`, which skips the login-node checks
(secrets, preflight), so the renderer's safety is checked for those keys too.
"""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

import pytest
import yaml
from click.testing import CliRunner, Result
from shell_scan import check_header, quoting_contexts, sbatch_words, single_quoted_segment

from hpceval.cli.main import cli
from hpceval.config.checks import PATH_KEYS
from hpceval.config.schema import RunSpec

FAKES = Path(__file__).resolve().parents[1] / "fakes"
TASKS = FAKES / "ask-harness.yaml"  # host harness: curl + python, its prompt from params.extra
# Each run of this module gets its own sentinel folder; nothing may ever create it.
SENTINEL = Path(tempfile.gettempdir()) / f"hpceval-pwned-{secrets.token_hex(4)}"
TOUCH = f"touch {SENTINEL}"
PAYLOADS: dict[str, str] = {
    # Quotes of both kinds, ;, $( ), backticks, a comment that would hide the rest, and a
    # header directive: each a command of its own if it escaped its quotes. The '#' before
    # rm means it never runs, even injected: the touch alone proves an injection.
    "shell-metachars": (f"x'\"; touch {SENTINEL}/meta; $(touch {SENTINEL}/subst) "
                        f"`touch {SENTINEL}/tick` #SBATCH --wrap=id; rm -rf ~"),
    "newline": f"x\ntouch {SENTINEL}/nl\n",
    "nul": "x\x00y",
    "rtl-marks": "model\u202egpj.exe\u2066\u2069",
    "very-long": "L" * 5000 + f"'$(touch {SENTINEL}/long)",
    "jinja": "jinja{{ 7*7 }}jinja{% raw %}",  # evaluated, it would read jinja49jinja (or fail)
    "sbatch-wrap-line": f"x\n#SBATCH --wrap='touch {SENTINEL}/wrap'",
    "leading-dash": "--help",
}
# Run by design, verbatim, by the job (docs: "site admin code, not quoted"); still checked for
# bash -n and a clean header, but its payload is not expected to stay quoted.
TRUSTED_SHELL = {"execution.pre_commands", "execution.module_init"}
TASK_NAME = "ask_a"


def _unwrap(tp: Any) -> Any:
    """X | None -> X: an optional key is as string-valued as a required one."""
    if get_origin(tp) in (Union, types.UnionType):
        args = tuple(a for a in get_args(tp) if a is not type(None))
        return _unwrap(args[0]) if len(args) == 1 else tp
    return tp


def _origin_args(tp: Any) -> tuple[Any, tuple[Any, ...]]:
    tp = _unwrap(tp)
    return get_origin(tp), get_args(tp)


def schema_keys(cls: type = RunSpec, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(path, type) of every leaf key; a list of dataclasses (tasks) is entered at [0]."""
    hints = get_type_hints(cls)
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        path, tp = f"{prefix}{f.name}", hints[f.name]
        origin, args = _origin_args(tp)
        if dataclasses.is_dataclass(tp):
            yield from schema_keys(tp, f"{path}.")  # type: ignore[arg-type]
        elif origin is list and dataclasses.is_dataclass(args[0]):
            yield from schema_keys(args[0], f"{path}[0].")  # type: ignore[arg-type]
        else:
            yield path, tp


def string_cases() -> list[tuple[str, str, str]]:
    """(key path, how the payload is placed, payload name) for every string-valued key."""
    cases: list[tuple[str, str, str]] = []
    for path, tp in schema_keys():
        origin, args = _origin_args(tp)
        if _unwrap(tp) is str or (origin is list and args == (str,)):
            cases += [(path, "value", name) for name in PAYLOADS]
        elif origin is Literal:  # a fixed set of words: a few payloads show the refusal
            cases += [(path, "value", name) for name in SHORT_LIST]
        elif origin is dict:  # values as free as strings; keys are names, a few payloads
            cases += [(path, "dict-value", name) for name in PAYLOADS]
            cases += [(path, "dict-key", name) for name in SHORT_LIST]
        # numbers and booleans: their wrong types are in tests/data/bad-configs.yaml
    return cases


SHORT_LIST = ("shell-metachars", "newline", "nul", "jinja")


CASES = string_cases()


def test_the_walk_finds_every_string_key() -> None:
    keys = {path for path, _, _ in CASES}
    # A few known ones, from each section and both params blocks; more appear automatically.
    assert {"execution.partition", "execution.modules", "execution.env_vars",
            "execution.sbatch_extra_flags", "deployment.command", "deployment.extra_args",
            "target.api_endpoint.api_key_name", "evaluation.tasks[0].name",
            "evaluation.tasks[0].params.extra", "evaluation.params.extra"} <= keys
    assert len(keys) >= 40 and len(CASES) == len(set(CASES))


def base_config(path: str, out: Path, ckpt: Path) -> dict[str, Any]:
    """A valid run that renders the key: containers and vLLM for most keys; the command
    deployment for deployment.command; an external endpoint for target.api_endpoint.url."""
    task = {"name": TASK_NAME, "container": "docker://example.org/harness:1",
            "params": {"extra": {"question": "2+2?", "answer": "4"}}}
    deployment: dict[str, Any] = {"type": "vllm", "checkpoint_path": str(ckpt),
                                  "served_model_name": "tiny"}
    target: dict[str, Any] = {}
    if path == "deployment.command":
        deployment = {"type": "command", "runtime": "host", "command": "serve --port $PORT",
                      "served_model_name": "tiny"}
    elif path == "target.api_endpoint.url":
        deployment = {"type": "none"}
        target = {"api_endpoint": {"url": "http://127.0.0.1:9/v1", "model_id": "tiny"}}
    elif path == "deployment.hf_model_handle":
        del deployment["checkpoint_path"]
    run = {"defaults": [{"execution": "slurm"}],
           "execution": {"output_dir": str(out), "gpus_per_node": 2, "walltime": "00:10:00"},
           "deployment": deployment, "evaluation": {"tasks": [task]}}
    if target:
        run["target"] = target
    return run


def place(run: dict[str, Any], path: str, form: str, value: str, out: Path) -> None:
    parts = [p for p in re.split(r"\.|\[0\]", path) if p]
    node: Any = run
    for part in parts[:-1]:
        node = node[0] if isinstance(node, list) else node.setdefault(part, {})
        if isinstance(node, list):
            node = node[0]
    leaf = parts[-1]
    if form == "dict-key":
        node.setdefault(leaf, {})[value] = "x"
        return
    if form == "dict-value":
        name = {"extra": "question", "sbatch_extra_flags": "mail-user"}.get(leaf, "HOSTILE_VAR")
        node.setdefault(leaf, {})[name] = value
        return
    if path == "execution.output_dir":
        value = f"{out}/{value}"
    elif path in PATH_KEYS:
        value = f"/tmp/hostile/{value}"  # absolute, so the payload is what is tested
    node[leaf] = [value] if isinstance(node.get(leaf), list) or leaf in _LIST_KEYS else value


_LIST_KEYS = {p.rsplit(".", 1)[-1] for p, tp in schema_keys() if _origin_args(tp)[0] is list}


def key_names(path: str, line: str) -> bool:
    """Does an error line name the key? Tasks are addressed by name (or [index])."""
    head, _, tail = path.partition("[0]")
    if not tail:
        return f" {path}" in line or f": {path}" in line
    return f" {head}" in line and (tail in line or f"{head}{tail}" in line)


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("catalogue-cache")  # the task index, built once


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shared_cache: Path) -> Path:
    monkeypatch.chdir(tmp_path)
    # Durability is not under test here, and ~700 submits x 13 fsyncs dominate the run time.
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    monkeypatch.setenv("HPCEVAL_TASKS_PATH", str(TASKS))
    monkeypatch.setenv("XDG_CACHE_HOME", str(shared_cache))
    monkeypatch.setenv("HPCEVAL_CACHE_DIR", str(tmp_path / "index"))
    monkeypatch.setenv("FAKE_SBATCH_LOG", str(tmp_path / "sbatch.log"))
    monkeypatch.setenv("PATH", f"{FAKES / 'recording_sbatch'}:{os.environ['PATH']}")
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    return tmp_path


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def check_refusal(result: Result, path: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output[-2000:], result.exception)
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("hpceval: config error: ")]
    assert errors, result.stderr[-2000:]
    # One line per issue: a value's newline must not continue the message on a new line.
    assert all(ln.startswith("hpceval: ") for ln in lines), result.stderr[-2000:]
    assert all(key_names(path, ln) for ln in errors), errors
    assert all("fix:" in ln for ln in errors), errors


@pytest.mark.slow
def test_hostile_value(path: str, form: str, payload: str, sandbox: Path) -> None:
    value = PAYLOADS[payload]
    out = sandbox / "runs"
    run_file = sandbox / "run.yaml"
    run = base_config(path, out, sandbox / "ckpt")
    place(run, path, form, value, out)
    run_file.write_text(yaml.safe_dump(run, sort_keys=False, allow_unicode=True))
    result = invoke("submit", str(run_file))
    sbatch_log = sandbox / "sbatch.log"
    if result.exit_code != 0:
        check_refusal(result, path)
        assert not sbatch_log.exists(), "refused, yet sbatch was called"
        assert not out.exists(), sorted(map(str, out.rglob("*")))[:5]
        rendered = sandbox / "rendered"
        result = invoke("render", str(run_file), "--out", str(rendered))
        if result.exit_code != 0:
            check_refusal(result, path)
            assert not rendered.exists()
            return
        scripts = sorted(p for p in rendered.rglob("*") if p.is_file())
    else:
        (run_dir,) = [p.parent for p in out.rglob("run.json")]
        # the job, after the pull job of an image nothing staged (render/pull.py)
        pulls = (run_dir / "pull.sbatch").is_file()
        assert len(sbatch_log.read_text().splitlines()) == 1 + pulls
        scripts = sorted(p for p in run_dir.rglob("*") if p.suffix in (".sbatch", ".sh"))
        assert scripts
        for written in run_dir.rglob("*"):  # run.yaml, run.json, scripts: never evaluated
            if written.is_file():
                assert "jinja49jinja" not in written.read_text(errors="replace")
    for script in scripts:
        check_script(script.read_text(), path, payload)
    assert not SENTINEL.exists()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.function is test_hostile_value:
        metafunc.parametrize(("path", "form", "payload"), CASES,
                             ids=[f"{p}:{f}:{n}" for p, f, n in CASES])


# --- the rendered script ---------------------------------------------------------------------

def check_script(text: str, path: str, payload: str) -> None:
    assert "jinja49jinja" not in text
    check_header(text)
    if path in TRUSTED_SHELL:
        return  # the admin's shell, as written: even its syntax is theirs
    proc = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    contexts = quoting_contexts(text)
    segments: list[str] = []
    for match in re.finditer(re.escape(TOUCH), text):
        where = {contexts[i] for i in range(match.start(), match.end())}
        line = text.count("\n", 0, match.start()) + 1
        assert where in ({"single"}, {"comment"}), (
            f"{payload} lands unquoted ({where}) on line {line}: "
            f"{text.splitlines()[line - 1][:300]!r}")
        if where == {"single"}:
            segments.append(single_quoted_segment(text, contexts, match.start()))
    run_quoted_parts(segments)
    run_assignments(text)


def run_quoted_parts(segments: list[str]) -> None:
    """Let bash read each quoted part back: it must print it literally and run nothing."""
    if not segments:
        return
    script = "printf '%s\\0' " + " ".join(segments)
    out = bash_in_sandbox(script)
    assert out.split(b"\0")[:-1] == [s[1:-1].encode() for s in segments]


_ASSIGN = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=\S")


def run_assignments(text: str) -> None:
    """Every variable assignment holding the payload: run them, each value must be literal."""
    lines = [(line, m.group(1)) for line in text.splitlines()
             if (m := _ASSIGN.match(line)) and TOUCH in line]
    if not lines:
        return
    script = "".join(f"{line}\nprintf '%s\\0' \"${{{name}}}\"\n" for line, name in lines)
    values = bash_in_sandbox(script).split(b"\0")[:-1]
    assert len(values) == len(lines) and all(TOUCH.encode() in v for v in values), lines


def bash_in_sandbox(script: str) -> bytes:
    with tempfile.TemporaryDirectory() as home:
        proc = subprocess.run(["bash", "-c", script], capture_output=True, check=False,
                              cwd=home, env={"PATH": os.environ["PATH"], "HOME": home},
                              timeout=30)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert not SENTINEL.exists(), f"{script[:300]!r} created {SENTINEL}"
    return proc.stdout


def test_the_scanner_sees_unquoted_text() -> None:
    """The checks above would catch a value that skipped the quoting."""
    text = (f"x={TOUCH}\necho \"$(echo '{TOUCH}')\" # {TOUCH}\n"
            f"y='{TOUCH}' z=\"{TOUCH}\"\n")
    ctx = quoting_contexts(text)
    found = [{ctx[i] for i in range(m.start(), m.end())}
             for m in re.finditer(re.escape(TOUCH), text)]
    assert found == [{"bare"}, {"single"}, {"comment"}, {"single"}, {"double"}]
    assert sbatch_words(' --comment="a b" # c') == ["--comment=a b"]
    assert sbatch_words(" --comment=a --wrap=b") == ["--comment=a", "--wrap=b"]


def test_sentinel_never_created() -> None:
    assert not SENTINEL.exists()
    shutil.rmtree(SENTINEL, ignore_errors=True)


# --- the same refusals against the real dev cluster: nothing reaches Slurm -------------------

BAD_CONFIGS = yaml.safe_load((FAKES.parent / "data" / "bad-configs.yaml").read_text())
MISSING_SECRET = """\
defaults:
- execution: local-dev
execution: {output_dir: OUT, offline: false}
deployment: {type: command, runtime: host, command: python -m server --port $PORT,
             served_model_name: tiny}
evaluation:
  tasks: [gpqa]   # lm-evaluation-harness.gpqa reads $HF_TOKEN (required_env)
"""


@pytest.mark.slurm
@pytest.mark.slow
def test_refused_configs_never_reach_slurm(slurm_cluster: object, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Every malformed config, plus a harness secret that is not set (a preflight refusal,
    which `submit --dry-run` only warns about), through `hpceval submit` with the real sbatch:
    exit 2 naming the key, no run directory, no job under a name only this test uses."""
    from datetime import datetime, timedelta

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("HPCEVAL_CACHE_DIR", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    out = tmp_path / "runs"
    job_name = f"hpceval-refused-{secrets.token_hex(4)}"
    since = (datetime.now() - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S")
    cases = [(c["name"], c["key"], c["config"]) for c in BAD_CONFIGS]
    cases.append(("harness secret not set", "evaluation.tasks.gpqa.env_vars", MISSING_SECRET))
    for name, key, config in cases:
        run_file = tmp_path / "run.yaml"
        run_file.write_text(config.replace("/tmp/hpceval-test-runs", str(out))
                            .replace("OUT", str(out)))
        result = invoke("submit", str(run_file), "-o", f"execution.job_name={job_name}")
        assert result.exit_code == 2, (name, result.output[-2000:])
        errors = [ln for ln in result.stderr.splitlines() if ln.startswith("hpceval: config")]
        assert any(key in ln and "fix:" in ln for ln in errors), (name, errors)
    assert not out.exists() and not (tmp_path / "home" / ".cache").exists()
    assert not list((tmp_path / "cache").glob("hpceval/runs.json"))
    queued = subprocess.run(["squeue", "-h", "--name", job_name], capture_output=True,
                            text=True, check=True).stdout
    accounted = subprocess.run(["sacct", "-n", "-X", "--name", job_name, "-S", since],
                               capture_output=True, text=True, check=True).stdout
    assert (queued.strip(), accounted.strip()) == ("", ""), (queued, accounted)
    assert len(cases) >= 50
