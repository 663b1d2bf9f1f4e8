"""Rendered job scripts on the real Slurm dev cluster (scripts/slurm/start-cluster.sh).

The server is tests/fakes/reference_server.py behind the `command` deployment: two nodes with
no GPUs give two CPU instances, so the data-parallel path (one srun step per instance, the
in-job proxy, the health wait) runs for real. Harnesses are host-installed (curl, sleep) from a
user catalogue in HPCEVAL_TASKS_PATH.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import site
from support.ports import free_port
from support.site_users import UserTmp, owned_mkdir

from hpceval.backends.slurm.client import CommandSlurmClient
from hpceval.config import load_config
from hpceval.render import JobContext, render_job
from tests.integration.drill_support import assert_none_left, leftovers, own_catalogue, sbatch

pytestmark = pytest.mark.slurm

FAKES = Path(__file__).resolve().parents[1] / "fakes"
SCORE = ("import json, sys; d = sys.argv[1]; r = json.load(open(d + '/response.json')); "
         "a = r['choices'][0]['message']['content']; "
         "json.dump({'results': {sys.argv[2]: {'exact_match,none': float(a == '4')}}}, "
         "open(d + '/results_0.json', 'w'))")
SERVER = FAKES / "reference_server.py"
CATALOGUE = """\
schema: 1
harness:
  name: it-harness
  description: host tools talking to the endpoint
  runtime: host
  parser: lm_eval
  default_endpoint_type: chat
  # it_ask: one chat request with curl, scored (exact match on "4") into an lm-eval style
  # results file, so the real `hpceval.job collect` can read it.
  command: |
    {%- set score = SCORE -%}
    {%- if task.task_id in ("ask", "think") -%}
    {%- set question = "What is 2+2?" if task.task_id == "ask" else "<think>plan</think>done" -%}
    {%- set rest = '", "messages": [{"role": "user", "content": "' ~ question ~ '"}]}' -%}
    {%- set body = '{"model": "' ~ model_id ~ rest -%}
    curl -sf -H 'Content-Type: application/json' \\
      -H @<(echo "Authorization: Bearer ${OPENAI_API_KEY:-}") \\
      -d {{ body | q }} {{ endpoint_url | q }} \\
      -o {{ output_dir | q }}/response.json &&
    python3 -c {{ score | q }} {{ output_dir | q }} {{ task.name | q }}
    {%- else -%}
    sleep {{ params.extra.seconds | string | q }}
    {%- endif %}
tasks:
  - {name: it_ask, task_id: ask, endpoint_type: chat, description: one chat request}
  - {name: it_ask_again, task_id: ask, endpoint_type: chat, description: "the same, again"}
  - {name: it_sleep, task_id: sleep, endpoint_type: chat, description: a long harness}
  - {name: it_sleep_again, task_id: sleep, endpoint_type: chat, description: "the same, again"}
  - {name: it_think, task_id: think, endpoint_type: chat, description: an answer with a trace}
""".replace("SCORE", json.dumps(SCORE))


@pytest.fixture(scope="module")
def workdir(user_tmp_factory: UserTmp) -> Iterator[Path]:
    """A folder of alice's on scratch: the rendered jobs are hers (drill_support.sbatch)."""
    with own_catalogue(user_tmp_factory.mktemp("rendered-jobs"), "it.yaml", CATALOGUE) as root:
        yield root


def submit(workdir: Path, name: str, *, server_args: str = "",
           tasks: list[dict[str, Any]] | None = None, health_timeout: int = 120,
           interceptors: dict[str, Any] | None = None, external_url: str | None = None,
           max_concurrent_tasks: int | None = None,
           overlap_load: bool = False) -> tuple[str, Path, Path]:
    run: dict[str, Any] = {
        "execution": {"nodes": 2, "gpus_per_node": 0, "output_dir": str(workdir / "runs")},
        "deployment": {"type": "command", "runtime": "host", "served_model_name": "ref-model",
                       "command": f"exec python3 {SERVER} --model ref-model {server_args}",
                       "health_timeout": health_timeout},
        "evaluation": {"tasks": tasks or [{"name": "it_ask"}, {"name": "it_ask_again"}],
                       "interceptors": interceptors or {}},
    }
    run["evaluation"]["overlap_load"] = overlap_load
    if max_concurrent_tasks is not None:
        run["evaluation"]["max_concurrent_tasks"] = max_concurrent_tasks
    if external_url is not None:  # a server outside the job: deployment.type none
        run["deployment"] = {"type": "none"}
        run["execution"]["nodes"] = 1
        run["target"] = {"api_endpoint": {"url": external_url, "model_id": "ref-model"}}
    run_file = workdir / f"{name}.yaml"
    run_file.write_text(yaml.safe_dump(run))
    resolved = load_config(run_file, profile="local-dev")
    run_dir = workdir / "runs" / name
    script = run_dir / "job.sbatch"
    model_dir = owned_mkdir(run_dir / "models" / "ref")  # alice's, as her submit would make
    ctx = JobContext(str(run_dir), name, "ref", str(FAKES / "job_python"))
    script.write_text(render_job(resolved, ctx))
    return sbatch(str(script)), model_dir, script


def wait_done(client: CommandSlurmClient, job_id: str, timeout: float = 150) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = client.sacct([job_id]).get(job_id)
        if record is not None and record.state not in ("PENDING", "RUNNING", "COMPLETING",
                                                       "CONFIGURING"):
            return record.state
        time.sleep(1)
    client.cancel([job_id])
    raise AssertionError(f"job {job_id} did not finish in {timeout} s")


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def job_log(model_dir: Path, job_id: str) -> str:
    path = model_dir / f"slurm-{job_id}.log"
    return path.read_text() if path.exists() else ""


def unique_duration() -> str:
    """A `sleep` argument (about an hour) that no other process on this machine has."""
    return f"{3000 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**6:06d}"


def test_two_cpu_instances_serve_every_task(slurm_cluster: CommandSlurmClient,
                                            workdir: Path) -> None:
    job_id, model_dir, _ = submit(workdir, "ok")
    state = wait_done(slurm_cluster, job_id)
    log = job_log(model_dir, job_id)
    assert state == "COMPLETED", log
    assert "all instances ready" in log and "all 2 task(s) passed" in log
    for key in ("it-harness.it_ask", "it-harness.it_ask_again"):
        response = json.loads((model_dir / "tasks" / key / "harness" / "response.json").read_text())
        assert response["choices"][0]["message"]["content"] == "4"
        assert (model_dir / "tasks" / key / "done").exists()
    # One server per node, each with its exact command line recorded next to its log.
    for i, node in enumerate(("node1", "node2")):
        cmd = (model_dir / "server" / f"instance-{i}.cmd").read_text()
        assert str(SERVER) in cmd
        assert f"instance {i} (head) on {node}" in log
    assert (model_dir / "progress.json").exists()  # the proxy ran in front of both instances
    assert not leftovers("ref-model")


def assert_intercepted(model_dir: Path, system_prompt: str) -> dict[str, Any]:
    """Task it_think went through the proxy's chain: the server echoed "<think>plan</think>done"
    and the harness got the answer with the trace moved out of it (strip_reasoning); the
    server got `system_prompt` first. Returns the request as the proxy logged it."""
    task = model_dir / "tasks" / "it-harness.it_think" / "harness"
    message = json.loads((task / "response.json").read_text())["choices"][0]["message"]
    assert (message["content"], message["reasoning_content"]) == ("done", "plan")
    logged = [json.loads(line) for line in (model_dir / "proxy-requests.jsonl").open()]
    request: dict[str, Any] = logged[0]["request"]
    assert request["messages"][0] == {"role": "system", "content": system_prompt}
    return request


def test_interceptors_change_requests_and_answers(slurm_cluster: CommandSlurmClient,
                                                  workdir: Path) -> None:
    """evaluation.interceptors reach the in-job proxy of a real job: the server sees the system
    prompt and the added field, the harness sees the answer without its reasoning trace."""
    job_id, model_dir, _ = submit(workdir, "interceptors", tasks=[
        {"name": "it_think"}], interceptors={
            "system_prompt": "-- be brief; 'quoted' $HOME", "strip_reasoning": True,
            "add_params": {"chat_template_kwargs": {"enable_thinking": False}},
            "log_requests": 5})
    state = wait_done(slurm_cluster, job_id)
    assert state == "COMPLETED", job_log(model_dir, job_id)
    request = assert_intercepted(model_dir, "-- be brief; 'quoted' $HOME")
    assert request["chat_template_kwargs"] == {"enable_thinking": False}


def test_each_task_gets_its_own_interceptors(slurm_cluster: CommandSlurmClient,
                                             workdir: Path) -> None:
    """NeMo Evaluator's one adapter per task, through one proxy: two tasks send the same
    request, each with its own system prompt (evaluation.tasks[].interceptors); the server's
    request log shows each task's own prompt, so neither got the other's cached answer."""
    log_dir = owned_mkdir(workdir / "per-task-requests")  # the server (alice's) writes there
    job_id, model_dir, _ = submit(
        workdir, "per-task-interceptors",
        server_args=f"--request-log {log_dir}", interceptors={"log_requests": 5}, tasks=[
            {"name": "it_ask", "interceptors": {"system_prompt": "you are task one"}},
            {"name": "it_ask_again", "interceptors": {"system_prompt": "you are task two"}}])
    state = wait_done(slurm_cluster, job_id)
    log = job_log(model_dir, job_id)
    assert state == "COMPLETED", log
    assert "all 2 task(s) passed" in log
    seen = [json.loads(line) for f in sorted(log_dir.glob("requests-*.jsonl"))
            for line in f.open()]
    prompts = sorted(entry["body"]["messages"][0]["content"] for entry in seen)
    assert prompts == ["you are task one", "you are task two"], seen
    assert {entry["body"]["messages"][-1]["content"] for entry in seen} == {"What is 2+2?"}
    # the proxy's log names each task's route (log_requests is the run's, merged into both)
    logged = [json.loads(line) for line in (model_dir / "proxy-requests.jsonl").open()]
    assert sorted((e["task"], e["request"]["messages"][0]["content"]) for e in logged) == [
        ("it-harness.it_ask", "you are task one"), ("it-harness.it_ask_again", "you are task two")]


def test_interceptors_in_front_of_an_external_endpoint(slurm_cluster: CommandSlurmClient,
                                                       workdir: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """deployment.type none with evaluation.interceptors: the job starts the proxy in front of
    the outside server, so the same changes apply (and requests are cached and counted). On
    the site in a box the server is outside: on this machine's loopback under a name that
    only the site's HTTP proxy resolves, and the job reaches it through that proxy
    (https_proxy/http_proxy in the submit environment, as users on such sites set them)."""
    port = free_port()
    server = subprocess.Popen([sys.executable, str(SERVER), "--port", str(port), "--model",
                               "ref-model"], stderr=subprocess.DEVNULL)
    outside = site.nodes_have_own_network()
    url = f"http://{site.OUTSIDE if outside else '127.0.0.1'}:{port}/v1/chat/completions"
    try:
        wait_for(lambda: subprocess.run(["curl", "-sf", f"http://127.0.0.1:{port}/health"],
                                        capture_output=True).returncode == 0, 20, "the server")
        if outside:  # the job's environment (sbatch passes the submit shell's)
            monkeypatch.setenv("http_proxy", site.proxy_url())
            monkeypatch.setenv("https_proxy", site.proxy_url())
        job_id, model_dir, _ = submit(
            workdir, "external-interceptors", tasks=[{"name": "it_think"}],
            external_url=url,
            interceptors={"system_prompt": "be brief", "strip_reasoning": True,
                          "log_requests": 5})
        state = wait_done(slurm_cluster, job_id)
    finally:
        server.terminate()
        server.wait(10)
    assert state == "COMPLETED", job_log(model_dir, job_id)
    assert_intercepted(model_dir, "be brief")
    progress = json.loads((model_dir / "progress.json").read_text())
    assert progress["requests"]["done"] == 1
    if outside:
        passed = site.PROXY_LOG.read_text(encoding="utf-8").splitlines()
        assert any(line.endswith(f" POST {url} 200") for line in passed), passed[-20:]


def test_finished_tasks_are_skipped_by_a_later_job(slurm_cluster: CommandSlurmClient,
                                                   workdir: Path) -> None:
    first, model_dir, script = submit(workdir, "resume")
    assert wait_done(slurm_cluster, first) == "COMPLETED"
    second = sbatch(str(script))
    assert wait_done(slurm_cluster, second) == "COMPLETED"
    log = job_log(model_dir, second)
    # Nothing left to do: the job ends before it starts any server.
    assert "every task is done already" in log and "instance 0" not in log, log


def test_a_server_that_dies_fails_the_job_fast(slurm_cluster: CommandSlurmClient,
                                               workdir: Path) -> None:
    started = time.monotonic()
    job_id, model_dir, _ = submit(workdir, "dies", server_args="--fail",
                                  health_timeout=600)
    state = wait_done(slurm_cluster, job_id)
    log = job_log(model_dir, job_id)
    assert state == "FAILED", log
    assert time.monotonic() - started < 90, "the health wait did not notice the dead server"
    assert "exited with status" in log
    assert "asked to fail at start-up" in log  # the tail of the server's own log
    assert "its launch command" in log and f"{SERVER}" in log and "--fail" in log
    assert "started (timeout" not in log  # no task was started
    # status leads with this line (models/<m>/job-failure)
    failure = (model_dir / "job-failure").read_text()
    assert failure.startswith("model server instance 0") and "exited while loading" in failure


def test_tasks_start_while_the_server_loads_and_ask_it_once_it_serves(
        slurm_cluster: CommandSlurmClient, workdir: Path) -> None:
    """evaluation.overlap_load: the harnesses start before "all instances
    ready", their requests wait in the proxy, and the server gets each one once, after it
    serves (its request log says whether /health still said loading)."""
    requests = owned_mkdir(workdir / "overlap-requests")
    job_id, model_dir, _ = submit(workdir, "overlap",
                                  server_args=f"--startup-delay 8 --request-log {requests}",
                                  overlap_load=True)
    state = wait_done(slurm_cluster, job_id)
    log = job_log(model_dir, job_id)
    assert state == "COMPLETED", log
    ready = log.index("all instances ready")
    assert log.index("task it-harness.it_ask: started") < ready, log
    assert log.index("task it-harness.it_ask_again: started") < ready, log
    assert "all 2 task(s) passed" in log
    seen = [json.loads(line) for f in requests.glob("requests-*.jsonl")
            for line in f.read_text().splitlines()]
    assert len(seen) == 2 and not any(r["loading"] for r in seen), seen
    proxy_log = (model_dir / "proxy.log").read_text()
    assert "forwarding 2 held request(s)" in proxy_log, proxy_log


def test_with_overlap_a_server_that_dies_fails_the_job_naming_it(
        slurm_cluster: CommandSlurmClient, workdir: Path) -> None:
    """evaluation.overlap_load: the tasks may have started while the server loaded; the job
    fails as without overlap, naming the server, and no task is scored or done."""
    job_id, model_dir, _ = submit(workdir, "dies-overlap", server_args="--fail",
                                  health_timeout=600, overlap_load=True)
    state = wait_done(slurm_cluster, job_id)
    log = job_log(model_dir, job_id)
    assert state == "FAILED", log
    assert "asked to fail at start-up" in log and "passed" not in log
    assert not list(model_dir.glob("tasks/*/done"))
    failure = (model_dir / "job-failure").read_text()
    assert failure.startswith("model server instance 0") and "exited while loading" in failure


def test_scancel_leaves_no_process_behind(slurm_cluster: CommandSlurmClient,
                                          workdir: Path) -> None:
    marker = unique_duration()
    job_id, model_dir, _ = submit(workdir, "cancel", tasks=[
        {"name": "it_sleep", "params": {"extra": {"seconds": marker}}}])
    wait_for(lambda: "task it-harness.it_sleep: started" in job_log(model_dir, job_id), 90,
             "the long task to start")
    wait_for(lambda: bool(leftovers(f"sleep {marker}")), 20, "the harness process")
    slurm_cluster.cancel([job_id])
    assert wait_done(slurm_cluster, job_id) == "CANCELLED"
    assert_none_left(f"sleep {marker}")
    assert_none_left(str(SERVER))


def test_walltime_signal_stops_tasks_cleanly(slurm_cluster: CommandSlurmClient,
                                             workdir: Path) -> None:
    """The walltime signal with tasks running concurrently: two long tasks fill both slots and
    a third waits for one. Every running task is stopped and left unfinished for the successor,
    and no task starts after the signal (the waiting one never starts)."""
    markers = {"it-harness.it_sleep": unique_duration(),
               "it-harness.it_sleep_again": unique_duration()}
    job_id, model_dir, _ = submit(workdir, "usr1", tasks=[
        {"name": key.split(".")[1], "params": {"extra": {"seconds": marker}}}
        for key, marker in markers.items()] + [{"name": "it_ask"}], max_concurrent_tasks=2)
    wait_for(lambda: all(f"task {key}: started" in job_log(model_dir, job_id) for key in markers),
             90, "both long tasks to start")
    wait_for(lambda: all(leftovers(f"sleep {marker}") for marker in markers.values()), 20,
             "both harness processes")
    # What `#SBATCH --signal=B:USR1@N` does before the walltime, sent now.
    subprocess.run(["scancel", "--batch", "--signal=USR1", job_id], check=True)
    state = wait_done(slurm_cluster, job_id)
    log = job_log(model_dir, job_id)
    # not done, but a successor job continues it: exit 0, not FAILED 143 (hpc-admin-2 N13)
    assert state == "COMPLETED", log
    assert "runs the unfinished tasks" in log, log
    assert log.count("walltime ends in") == 1, log
    after = log.split("walltime ends in", 1)[1]
    assert ": started" not in after, log  # nothing starts after the signal
    assert "task it-harness.it_ask: started" not in log, log  # it waited for a slot
    for key in markers:  # both were running: stopped, not failed, and not done
        assert f"task {key}: stopped (walltime signal or cancel)" in after, log
        assert f"task {key}: FAILED" not in log, log
    assert not any((model_dir / "tasks" / key / "done").exists()
                   for key in [*markers, "it-harness.it_ask"])
    assert "stopped before the walltime" in after
    assert (model_dir / "interrupted").exists()
    # auto_resume: the interrupted job queued its successor; it would sleep again, so stop it.
    successor = (model_dir.parents[1] / "jobs.chain").read_text().split()[:1]
    assert successor and f"successor job {successor[0]}" in log, log
    slurm_cluster.cancel(successor)
    assert wait_done(slurm_cluster, successor[0]) == "CANCELLED"
    for marker in markers.values():
        assert_none_left(f"sleep {marker}")
