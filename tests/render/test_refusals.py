"""What render refuses, loading refuses first: `config show` exits 2 naming the same key.

Every `raise ConfigError` in hpceval/render/ (and in the serving engines, container runtimes
and the Slurm backend's header it builds the job with) is found in the source, and each must
have a case below (or a reason why no loaded config can reach it). A case is one bad value:
set in a run file, `hpceval config show` must refuse it (exit 2, the key named); set by hand in
an otherwise valid loaded config, with its tasks resolved but the load's checks skipped,
render_job must refuse it naming the same key. So the case is one render would refuse, and
config show does.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from render_helpers import context, resolve

from hpceval.cli.main import cli
from hpceval.config import ConfigError, ResolvedConfig
from hpceval.config.tasks import resolve_tasks
from hpceval.render import render_job
from hpceval.tasks import load_catalogue

PACKAGE = Path(__file__).resolve().parents[2] / "hpceval"
RENDER = PACKAGE / "render"
# where render's refusals live: render's modules by name, the registries' as <package>.<module>
SOURCES = [(RENDER, ""), (PACKAGE / "engines", "engines."), (PACKAGE / "runtimes", "runtimes."),
           (PACKAGE / "backends" / "slurm", "backends.slurm.")]
HEADER = "backends.slurm.header"  # the #SBATCH header: the Slurm backend's
BASE: dict[str, Any] = {
    "deployment": {"type": "vllm", "checkpoint_path": "/m", "served_model_name": "m",
                   "image": "/images/vllm.sif", "tensor_parallel_size": 8},
    "evaluation": {"tasks": [{"name": "boxed_chat"}]},
}
HEADER_TEXT = ["job_name", "account", "partition", "qos", "reservation", "constraint",
               "gpu_type", "mem", "sbatch_comment", "walltime"]

# (raise site "module:function", the key both must name, the bad values by dotted key)
CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("job:_reject_nul", "deployment.served_model_name",
     {"deployment.served_model_name": "m\x00n"}),
    ("deployments:server_prefix", "deployment.runtime",
     {"execution.container_runtime": "none"}),
    ("deployments:server_prefix", "deployment.image", {"deployment.image": None}),
    ("steps:bind", "execution.hf_cache_dir", {"execution.hf_cache_dir": "/hf:cache"}),
    ("steps:bind", "execution.dataset_dir", {"execution.dataset_dir": "/data,sets"}),
    ("steps:checked_extra_bind", "execution.extra_binds[0]",
     {"execution.extra_binds": ["/a,/b"]}),
    *[(f"{HEADER}:sbatch_value", f"execution.{key}",
       {f"execution.{key}": "x\n#SBATCH --wrap=id"}) for key in HEADER_TEXT],
    (f"{HEADER}:sbatch_value", "execution.output_dir", {"execution.output_dir": "/runs/a\nb"}),
    (f"{HEADER}:sbatch_value", "execution.sbatch_extra_flags.mail-user",
     {"execution.sbatch_extra_flags": {"mail-user": "a@b\n#SBATCH --wrap=id"}}),
    (f"{HEADER}:header_lines", "execution.sbatch_extra_flags.--mail",
     {"execution.sbatch_extra_flags": {"--mail": "x"}}),
    ("engines.base:model_source", "deployment.checkpoint_path",
     {"deployment.checkpoint_path": None}),
    ("engines.base:served_name", "deployment.served_model_name",
     {"deployment.served_model_name": None}),
    ("engines.command:argv", "deployment.command", {"deployment.type": "command"}),
]
UNREACHABLE = {
    # models: entries set only deployment and target; execution, the whole header, is shared
    "sweep:sweep_header",
    # every config string is NUL-checked when loaded (the _reject_nul case), and a catalogue
    # command's when its task is resolved: what is left is a guard for bash
    "job:render_job",
    # the catalogue gives every container harness an image and a SIF (tasks/schema.py), and
    # a task's own container is never empty once loaded (NEL's bare names gain docker://)
    "steps:_runner",
    # a sweep's judge job: load_run refuses with the same rules first (config/judges.py,
    # tests/config/test_judges.py); config show refuses every auxiliary_deployments section
    # until the loader's side lands (branch aux-job), so no run file reaches render with one
    "judge_job:sweep_judges",
    "judge_job:render_judge_job",
}


def raise_sites() -> set[str]:
    sites: set[str] = set()
    for path, prefix in ((p, prefix) for folder, prefix in SOURCES for p in folder.glob("*.py")):
        tree = ast.parse(path.read_text())
        for func in ast.walk(tree):
            if not isinstance(func, ast.FunctionDef):
                continue
            for node in ast.walk(func):
                if isinstance(node, ast.Raise) and node.exc is not None and \
                        "ConfigError" in ast.unparse(node.exc):
                    sites.add(f"{prefix}{path.stem}:{func.name}")
    return sites


def test_every_render_refusal_has_a_case() -> None:
    assert raise_sites() == {site for site, _, _ in CASES} | UNREACHABLE


def _set(run: dict[str, Any], dotted: str, value: Any) -> None:
    *path, last = dotted.split(".")
    node = run
    for part in path:
        node = node.setdefault(part, {})
    node[last] = value


def _replaced(spec: Any, dotted: str, value: Any) -> Any:
    head, _, rest = dotted.partition(".")
    if rest:
        return dataclasses.replace(spec, **{head: _replaced(getattr(spec, head), rest, value)})
    return dataclasses.replace(spec, **{head: value})


@pytest.mark.parametrize(("site", "key", "bad"), CASES,
                         ids=[f"{site}-{key}" for site, key, _ in CASES])
def test_config_show_refuses_what_render_refuses(site: str, key: str, bad: dict[str, Any],
                                                  tmp_path: Path) -> None:
    # render: the bad values set by hand, the tasks resolved, the load's checks skipped
    base = resolve("slurm", BASE, tmp_path)
    spec = base.spec
    for dotted, value in bad.items():
        spec = _replaced(spec, dotted, value)
    tasks, _ = resolve_tasks(spec, load_catalogue(), None)
    bad_resolved = ResolvedConfig(spec, base.layout, base.composed, tasks)
    with pytest.raises(ConfigError) as caught:
        render_job(bad_resolved, context(bad_resolved))
    assert key in [issue.path for issue in caught.value.issues], caught.value
    # config show: the same values in the run file
    run = copy.deepcopy(BASE)
    for dotted, value in bad.items():
        _set(run, dotted, value)
    run_file = tmp_path / "run.yaml"
    run_file.write_text(yaml.safe_dump(run))
    result = CliRunner().invoke(cli, ["config", "show", "--profile", "slurm", str(run_file)])
    assert result.exit_code == 2, result.output
    refused = [line for line in result.stderr.splitlines()
               if line.startswith("hpceval: config error")]
    assert any(f"error: {key}:" in line for line in refused), result.stderr
