"""SGLang gets the job's token without a command line and listens on its node only (review F7's
SGLang part): the rendered launch, run in bash with a stand-in `sglang.launch_server` module
(SGLang is not installed here) that reports the argv it was given and the process's argv in
/proc, which `ps` shows to every user of the node.

Before, SGLang got no token at all (its `--api-key` is a command-line flag) and listened on
0.0.0.0: anyone on the cluster network could use the job's server.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from render_helpers import RenderFn

RUN = {"deployment": {"type": "sglang", "checkpoint_path": "/models/m", "served_model_name": "m",
                      "runtime": "host"},
       "evaluation": {"tasks": [{"name": "boxed_chat"}]}}
TOKEN = "tok-0123456789abcdef"
FAKE = """import json, sys
cmdline = open("/proc/self/cmdline", "rb").read().split(b"\\0")
print(json.dumps({"argv": sys.argv[1:], "cmdline": [a.decode() for a in cmdline if a]}))
"""


def _launch(script: str, tmp_path: Path, token: str) -> subprocess.CompletedProcess[str]:
    block = re.search(r"^# instance 0 of \d+: .*?(?=^INSTANCE_URLS\+=)", script, re.M | re.S)
    assert block, "no instance block in the script"
    env_fn = re.search(r"^server_environment\(\) {.*?^}$", script, re.M | re.S)
    assert env_fn, "no server_environment in the script"
    fake = tmp_path / "sglang"
    fake.mkdir(exist_ok=True)
    (fake / "__init__.py").write_text("")
    (fake / "launch_server.py").write_text(FAKE)
    code = "\n".join([
        env_fn.group(0),
        'launch_server() { shift 6; (server_environment; exec "$@"); }',
        f"HPCEVAL_JOB_TOKEN={token}  # a plain variable of the job, as in the script",
        f"NODES=(127.0.0.1) PORT_BASE=8000 SERVER_PIDS=() SERVER_DIR={tmp_path}",
        block.group(0)])
    return subprocess.run(["bash", "-c", code], capture_output=True, text=True, timeout=60,
                          check=False, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path)})


def test_sglang_gets_the_token_in_process_and_listens_on_its_node(
        render: RenderFn, tmp_path: Path) -> None:
    script = render("local-dev", RUN)
    out = _launch(script, tmp_path, TOKEN)
    assert out.returncode == 0, out.stdout + out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    argv, cmdline = seen["argv"], seen["cmdline"]
    assert argv[-2:] == ["--api-key", TOKEN]  # SGLang's own parser gets it
    assert argv[argv.index("--host") + 1] == "127.0.0.1"  # the node the proxy reaches it at
    assert "0.0.0.0" not in argv
    assert TOKEN not in " ".join(cmdline) and "--api-key" not in cmdline  # ps shows no key
    assert TOKEN not in script
    # the job's proxy sends it the token, and waits for SGLang's own ready line
    assert re.search(r'^ *start_proxy "\$MODEL_DIR" "\$PROXY_PORT" HPCEVAL_JOB_TOKEN ', script,
                     re.M), "the proxy does not send the token upstream"
    assert "INSTANCE_READY+=('The server is fired up and ready to roll!')" in script


def test_sglang_is_not_started_without_the_token(render: RenderFn, tmp_path: Path) -> None:
    out = _launch(render("local-dev", RUN), tmp_path, "''")
    assert out.returncode != 0
    assert "HPCEVAL_SGLANG_API_KEY is not set" in out.stderr
    assert "argv" not in out.stdout  # sglang.launch_server never ran
