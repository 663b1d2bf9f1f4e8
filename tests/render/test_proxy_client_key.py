"""The in-job proxy answers only its own job (review F3): the rendered `start_proxy` call and a
task's environment, run in bash with the real proxy in front of a stand-in server.

Before, the job started its proxy without client authentication: any uid on the node used the
model through it, read cached answers by replaying the harness's requests, and pushed the run's
progress. Now the proxy asks every client for the per-job token (by variable name, never on a
command line), and the harness gets it in its environment as OPENAI_API_KEY.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from render_helpers import RenderFn
from support.ports import free_port
from test_job_trust import VLLM_RUN, function

RUN = {"deployment": {**VLLM_RUN["deployment"], "runtime": "host"},
       "evaluation": {"tasks": [{"name": "boxed_chat"}]}}
ANSWER = json.dumps({"id": "c1", "object": "chat.completion", "choices": [
    {"index": 0, "message": {"role": "assistant", "content": "4"}, "finish_reason": "stop"}]})


AUTH: list[str | None] = []


@pytest.fixture
def upstream() -> Iterator[tuple[str, list[str]]]:
    """A stand-in model server: 200 on every GET and chat answers; records the POSTed paths
    (and in AUTH, the Authorization header each came with)."""
    seen: list[str] = []
    AUTH.clear()

    class Serve(http.server.BaseHTTPRequestHandler):
        def _answer(self, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._answer(b"{}")

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            seen.append(self.path)
            AUTH.append(self.headers.get("Authorization"))
            self._answer(ANSWER.encode())

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Serve)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "What is 2+2?"}]})
# curl's arguments for one chat request to the task's endpoint; the harness adds its key header
# from its environment (a header file from a pipe: never argv), as lm-eval sends OPENAI_API_KEY
ASK = ("ASK=(-s -o /dev/null -w '%{http_code}\\n' -H 'Content-Type: application/json' "
       f"-d '{BODY}' \"$HPCEVAL_ENDPOINT_URL\")")
KEY = '-H @<(echo "Authorization: Bearer $OPENAI_API_KEY")'
PREAMBLE = 'log() { echo "$*"; }\njob_failure() { echo "job_failure: $*"; }'


def stranger_curl() -> str:
    """What another uid on the node runs (root runs the tests here): the same curl, without
    the key, as nobody; "echo skipped" where runuser cannot."""
    runuser = shutil.which("runuser")
    return f'{runuser} -u nobody -- curl "${{ASK[@]}}"' \
        if os.geteuid() == 0 and runuser else "echo skipped"


def run_lines(code: str) -> tuple[dict[str, str], str]:
    """Run `code` in bash with a bare PATH: its "name: value" stdout lines, and all it printed."""
    out = subprocess.run(["bash", "-c", code], capture_output=True, text=True, timeout=90,
                         check=False, env={"PATH": "/usr/bin:/bin"})
    lines = dict(line.split(": ", 1) for line in out.stdout.splitlines() if ": " in line)
    return lines, out.stdout + out.stderr


def test_the_jobs_proxy_serves_the_harness_and_refuses_everyone_else(
        render: RenderFn, upstream: tuple[str, list[str]], tmp_path: Path) -> None:
    url, seen = upstream
    script = render("local-dev", RUN)
    call = re.search(r'^ *start_proxy "\$MODEL_DIR" "\$PROXY_PORT" .*$', script, re.M)
    assert call, "the script starts no model proxy"
    functions = "\n".join(function(script, name) for name in (
        "answers", "proxy_answers", "start_proxy", "task_environment_1"))
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    port = free_port()
    stranger = stranger_curl()
    code = "\n".join([
        PREAMBLE, functions,
        "HPCEVAL_CLIENT_TOKEN=tok-0123456789abcdef  # a plain variable of the job, as in it",
        "HPCEVAL_JOB_TOKEN=srv-0123456789abcdef  # the servers' token: only proxies send it",
        f"HPCEVAL_PYTHON={sys.executable} MODEL_DIR={model_dir} PROXY_PORT={port}",
        f"PROXY_PIDS=() PROXY_DIRS=() PROXY_ARGS=(--upstream {url})",
        call.group(0),
        f'export HPCEVAL_BASE_URL="http://127.0.0.1:$PROXY_PORT/v1" TASK_DIR={tmp_path}',
        'HPCEVAL_ENDPOINT_URL="$HPCEVAL_BASE_URL/chat/completions"', ASK,
        'echo "no key: $(curl "${ASK[@]}")"',
        f'echo "stranger: $({stranger})"',
        f'echo "harness: $(task_environment_1; curl "${{ASK[@]}}" {KEY})"',
        'echo "argv: $(tr "\\0" " " < /proc/${PROXY_PIDS[0]}/cmdline)"',
        'kill -TERM "${PROXY_PIDS[0]}"; wait "${PROXY_PIDS[0]}"',
    ])
    lines, output = run_lines(code)
    assert lines.get("no key") == "401", output
    assert lines.get("stranger") in ("401", "skipped"), output
    assert lines.get("harness") == "200", output
    assert seen == ["/v1/chat/completions"]  # only the harness's request reached the server
    # the key by name: never on the proxy's command line (ps shows it to every user)
    assert "--api-key-env HPCEVAL_CLIENT_TOKEN" in lines["argv"]
    assert "tok-0123456789abcdef" not in lines["argv"] + script
    progress = json.loads((model_dir / "progress.json").read_text())["requests"]
    assert (progress["done"], progress["failed"]) == (1, 0)  # strangers are not counted


def test_the_harness_key_follows_the_endpoint(render: RenderFn) -> None:
    served = render("local-dev", RUN)
    # the client key, not the servers' token: a process that takes the proxy's port after the
    # proxy died gets it from a harness (for up to a second), and it opens no server
    assert 'export OPENAI_API_KEY="${HPCEVAL_CLIENT_TOKEN}"' in served
    assert "OPENAI_API_KEY=\"${HPCEVAL_JOB_TOKEN}\"" not in served
    external = {"deployment": {"type": "none"}, "evaluation": RUN["evaluation"],
                "target": {"api_endpoint": {"url": "https://api.example.com/v1/chat/completions",
                                            "model_id": "m", "api_key_name": "EXAMPLE_KEY"}}}
    script = render("local-dev", external)
    # an endpoint with its own key: the proxy asks for that key, and sends it (by name)
    assert re.search(r'^ *start_proxy "\$MODEL_DIR" "\$PROXY_PORT" EXAMPLE_KEY EXAMPLE_KEY ',
                     script, re.M), script
    assert "OPENAI_API_KEY" not in script
    direct = {**external, "target": {"api_endpoint": {
        **external["target"]["api_endpoint"], "proxy": False}}}
    assert "start_proxy \"$MODEL_DIR\"" not in render("local-dev", direct)


def test_a_judges_proxy_asks_for_the_key_and_keeps_the_token_from_its_upstream(
        render: RenderFn, upstream: tuple[str, list[str]], tmp_path: Path) -> None:
    """A judge's proxy (review F3's last open part): before, it took requests from anyone on
    the node and passed the client's header on. Now it asks for the job's token, which the
    tasks get as JUDGE_API_KEY, and an external judge without a key of its own gets no header
    (the token stays in the job)."""
    url, seen = upstream
    run = {**RUN, "auxiliary_deployments": {"judge": {
        "type": "none", "url": f"{url}/v1", "model_id": "j"}}}
    script = render("local-dev", run)
    section = re.search(r"^# auxiliary_deployments\.judge: .*?"
                        r"^export HPCEVAL_AUX_JUDGE_CHAT_URL=.*?$", script, re.M | re.S)
    assert section, "the script starts no judge proxy"
    assert re.search(r"^start_proxy .*auxiliary/judge.* '' HPCEVAL_CLIENT_TOKEN ", section.group(0),
                     re.M), section.group(0)
    functions = "\n".join(function(script, name) for name in (
        "answers", "proxy_answers", "start_proxy", "upstream_args", "task_environment_1"))
    model_dir = tmp_path / "model"
    port = free_port()
    stranger = stranger_curl()
    judge_key = '-H @<(echo "Authorization: Bearer $JUDGE_API_KEY")'
    code = "\n".join([
        PREAMBLE, functions,
        "HPCEVAL_CLIENT_TOKEN=tok-0123456789abcdef HPCEVAL_JOB_TOKEN=srv-0123456789abcdef",
        f"HPCEVAL_PYTHON={sys.executable} MODEL_DIR={model_dir} PORT_BASE={port}",
        "PROXY_PIDS=() PROXY_DIRS=()", section.group(0), f"TASK_DIR={tmp_path}",
        "ASK=(-s -o /dev/null -w '%{http_code}\\n' -H 'Content-Type: application/json' "
        f"-d '{BODY}' \"$HPCEVAL_AUX_JUDGE_CHAT_URL\")",
        'echo "no key: $(curl "${ASK[@]}")"',
        f'echo "stranger: $({stranger})"',
        f'echo "task: $(task_environment_1; curl "${{ASK[@]}}" {judge_key})"',
        'kill -TERM "${PROXY_PIDS[0]}"; wait "${PROXY_PIDS[0]}"',
    ])
    lines, output = run_lines(code)
    assert lines.get("no key") == "401", output
    assert lines.get("stranger") in ("401", "skipped"), output
    assert lines.get("task") == "200", output
    assert seen == ["/v1/chat/completions"]  # only the task's request reached the judge
    assert AUTH == [None]  # the job's token is not passed on to an external judge
