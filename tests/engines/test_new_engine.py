"""Adding a serving engine is one module: a copy of the package with one new file in
hpceval/engines/ (and nothing else changed) accepts the new deployment type, checks it with the
engine's own capabilities, and renders its servers with its argv, token and ready line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml

ROOT = Path(__file__).parents[2]

ENGINE = '''
"""deployment.type echoserve: a made-up engine, only to show that one module is enough."""

from __future__ import annotations

from typing import Any

from hpceval.engines import register
from hpceval.engines.base import Engine, Server, model_source, served_name
from hpceval.shell import var


@register
class EchoServe(Engine):
    name = "echoserve"
    order = 9
    template = "deployment/sglang.j2"  # reuses a partial: its servers start the same way
    ready_line = "echoserve is up"
    token_env = "ECHOSERVE_TOKEN"
    command_word = "echoserve"

    def argv(self, server: Server, *, nnodes: int, rank: int) -> list[Any]:
        return ["echoserve", model_source(server), "--name", served_name(server),
                "--port", var("PORT")]
'''

PROBE = textwrap.dedent('''
    import json, sys
    from pathlib import Path
    from hpceval.config import ConfigError, load_config
    from hpceval.render import JobContext, render_job
    out = {}
    try:
        load_config(Path(sys.argv[1]), ["deployment.checkpoint_path=null"], profile="local-dev",
                    check_environment=False)
    except ConfigError as err:
        out["refused"] = [i.path for i in err.issues]
    resolved = load_config(Path(sys.argv[1]), [], profile="local-dev", check_environment=False)
    ctx = JobContext("/runs/inv-1", "inv-1", "m", "/venv/bin/python", hpceval_version="0.1.0")
    out["script"] = render_job(resolved, ctx)
    print(json.dumps(out))
''')


def test_a_new_engine_is_one_module(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    for folder in ("hpceval", "templates", "site-configs"):
        shutil.copytree(ROOT / folder, tree / folder,
                        ignore=shutil.ignore_patterns("__pycache__"))
    (tree / "hpceval" / "engines" / "echoserve.py").write_text(ENGINE)
    run = tmp_path / "run.yaml"
    run.write_text(yaml.safe_dump({
        "execution": {"output_dir": str(tmp_path / "runs"), "gpus_per_node": 2},
        "deployment": {"type": "echoserve", "checkpoint_path": "/models/m",
                       "served_model_name": "m", "runtime": "host", "tensor_parallel_size": 2},
        "evaluation": {"tasks": [{"name": "gsm8k"}]},
    }))
    proc = subprocess.run([sys.executable, "-c", PROBE, str(run)], cwd=tree,
                          env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin",
                               "HOME": str(tmp_path)},
                          capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    # the shared checks read its capabilities: a model source is required, as for vLLM
    assert "deployment.checkpoint_path" in out["refused"]
    script = out["script"]
    assert "  echoserve /models/m \\\n    --name m \\\n    --port \"${PORT}\"" in script
    assert 'export ECHOSERVE_TOKEN="${HPCEVAL_JOB_TOKEN}"' in script  # its token variable
    assert "INSTANCE_READY+=('echoserve is up')" in script  # its ready line
    assert "TP=2 x PP=1" in script  # its GPU need is TP x PP (the default)
