"""The site in a box's policies as Slurm itself applies them (scripts/slurm/start-cluster.sh):
partition `short` has a MaxTime of 30 minutes and `EnforcePartLimits=ALL` refuses a job above it
at submit; QOS `short` has a MaxWall of 30 minutes, enforced (`AccountingStorageEnforce=
associations,limits,qos`, `DenyOnLimit`), QOS `restricted` is granted to nobody, and partition
`cpu` has a QOS of its own (`cpujobs`, 45 minutes) that counts before the job's. hpceval
learns the limits and grants from Slurm (sinfo, sacctmgr, scontrol) and refuses such a run
before it writes or submits anything, naming the key and the fix; a run within them renders.
Account lab caps the queue of its sub-accounts lab-nlp (alice's) and lab-vision (bob's)
together (GrpSubmitJobs). alice, the site's ordinary user, submits and asks; bob's jobs fill
the shared QOS and the shared account."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from support.site_users import OTHER, USER, as_user, submitted

from hpceval.backends.slurm.client import CommandSlurmClient
from hpceval.runs.jobs import read_jobs
from tests.integration.drill_support import hpceval

pytestmark = pytest.mark.slurm
ASK_HARNESS = Path(__file__).resolve().parents[1] / "fakes" / "ask-harness.yaml"


def run_file(user_tmp: Path) -> Path:
    path = user_tmp / "run.yaml"
    path.write_text(yaml.safe_dump({
        "defaults": [{"execution": "local-dev"}],
        "execution": {"gpus_per_node": 0, "output_dir": str(user_tmp / "runs"),
                      "partition": "short"},
        "deployment": {"type": "command", "runtime": "host", "command": "exec true",
                       "served_model_name": "m"},
        "evaluation": {"tasks": [{"name": "ask_a", "params": {"extra": {
            "question": "What is 2+2?", "answer": "4"}}}]},
    }), encoding="utf-8")
    return path




def test_slurm_refuses_a_job_above_the_partitions_max_time(
        slurm_cluster: CommandSlurmClient) -> None:
    over = as_user(USER, "sbatch", "--test-only", "-p", "short", "-t", "60", "--wrap", "true")
    assert over.returncode != 0 and "time limit" in over.stderr.lower(), over.stderr
    within = as_user(USER, "sbatch", "--test-only", "-p", "short", "-t", "30", "--wrap", "true")
    assert within.returncode == 0, within.stderr


def test_slurm_enforces_the_qos_max_wall_and_grants(slurm_cluster: CommandSlurmClient) -> None:
    def test_only(*args: str) -> subprocess.CompletedProcess[str]:
        return as_user(USER, "sbatch", "--test-only", "-p", "debug", *args, "--wrap", "true")

    over = test_only("-q", "short", "-t", "60")
    assert over.returncode != 0 and "qos policy" in over.stderr.lower(), over.stderr
    assert test_only("-q", "short", "-t", "30").returncode == 0
    ungranted = test_only("-q", "restricted", "-t", "5")
    assert ungranted.returncode != 0 and "invalid qos" in ungranted.stderr.lower(), (
        ungranted.stderr)
    # partition cpu's own QOS (cpujobs, 45 minutes) caps every job there, and before the job's
    # own QOS: short's 30 minutes do not count in cpu
    def on_cpu(*args: str) -> subprocess.CompletedProcess[str]:
        return as_user(USER, "sbatch", "--test-only", "-p", "cpu", *args, "--wrap", "true")

    assert on_cpu("-t", "50").returncode != 0 and on_cpu("-t", "45").returncode == 0
    assert on_cpu("-q", "short", "-t", "40").returncode == 0


def test_a_run_above_the_partitions_max_time_is_refused_before_submit(
        slurm_cluster: CommandSlurmClient, user_tmp: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPCEVAL_TASKS_PATH", str(ASK_HARNESS))
    monkeypatch.setenv("XDG_CACHE_HOME", str(user_tmp / "cache"))
    path = run_file(user_tmp)
    refused = hpceval("submit", str(path), "-o", "execution.walltime=01:00:00")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "execution.walltime" in refused.stderr and "30 minutes" in refused.stderr, (
        refused.stderr)
    assert not (user_tmp / "runs").exists()  # nothing written, nothing submitted
    fits = hpceval("submit", str(path), "--dry-run", "-o", "execution.walltime=00:30:00")
    assert fits.returncode == 0, fits.stdout + fits.stderr

    # the QOS's MaxWall (on a partition without a MaxTime) and a QOS not granted to the user
    debug = ["-o", "execution.partition=debug"]
    over_qos = hpceval("submit", str(path), *debug, "-o", "execution.qos=short",
                       "-o", "execution.walltime=01:00:00")
    assert over_qos.returncode == 2, over_qos.stdout + over_qos.stderr
    assert "more than QOS short's MaxWall (30 minutes)" in over_qos.stderr, over_qos.stderr
    ungranted = hpceval("submit", str(path), *debug, "-o", "execution.qos=restricted",
                        "-o", "execution.walltime=00:10:00")
    assert ungranted.returncode == 2, ungranted.stdout + ungranted.stderr
    assert "execution.qos" in ungranted.stderr and "'restricted' is not a QOS" in (
        ungranted.stderr) and "grants few, normal, short" in ungranted.stderr, ungranted.stderr
    assert not (user_tmp / "runs").exists()  # nothing written, nothing submitted
    granted = hpceval("submit", str(path), "--dry-run", *debug, "-o", "execution.qos=short",
                      "-o", "execution.walltime=00:30:00")
    assert granted.returncode == 0, granted.stdout + granted.stderr

    # the partition's own QOS: refused above it; and it, not the job's QOS, is what counts
    cpu = ["-o", "execution.partition=cpu"]
    over_own = hpceval("submit", str(path), *cpu, "-o", "execution.walltime=00:50:00")
    assert over_own.returncode == 2, over_own.stdout + over_own.stderr
    assert "more than QOS cpujobs's MaxWall (partition cpu's own QOS) (45 minutes)" in (
        over_own.stderr), over_own.stderr
    assert not (user_tmp / "runs").exists()
    within_own = hpceval("submit", str(path), "--dry-run", *cpu, "-o", "execution.qos=short",
                         "-o", "execution.walltime=00:40:00")
    assert within_own.returncode == 0, within_own.stdout + within_own.stderr


def test_a_runs_cpu_jobs_fit_the_cpu_partitions_limits(
        slurm_cluster: CommandSlurmClient, user_tmp: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The pull job wants an hour; partition `cpu`'s own QOS (cpujobs, DenyOnLimit) allows 45
    minutes, so Slurm refused it, and with it the run. Rendered against the real partition,
    every script of the run passes `sbatch --test-only`."""
    monkeypatch.setenv("HPCEVAL_TASKS_PATH", str(ASK_HARNESS))
    monkeypatch.setenv("XDG_CACHE_HOME", str(user_tmp / "cache"))
    run = yaml.safe_load(run_file(user_tmp).read_text(encoding="utf-8"))
    run["execution"].update({"partition": "debug", "cpu_partition": "cpu", "gpus_per_node": 1,
                             "container_runtime": "apptainer", "walltime": "02:00:00"})
    run["deployment"] = {"type": "vllm", "checkpoint_path": "/models/m",
                         "served_model_name": "m", "image": "docker://vllm/vllm-openai:v0.32.0"}
    path = user_tmp / "pulls.yaml"
    path.write_text(yaml.safe_dump(run), encoding="utf-8")
    rendered = hpceval("render", str(path), "--out", str(user_tmp / "scripts"))
    assert rendered.returncode == 0, rendered.stdout + rendered.stderr
    scripts = sorted((user_tmp / "scripts").glob("*.sbatch"))
    assert {script.name for script in scripts} == {"job.sbatch", "pull.sbatch"}, scripts
    pull = (user_tmp / "scripts" / "pull.sbatch").read_text(encoding="utf-8")
    assert "#SBATCH --partition=cpu" in pull and "#SBATCH --time=45 " in pull, pull
    for script in scripts:
        tested = as_user(USER, "sbatch", "--test-only", str(script))
        assert tested.returncode == 0, (script.name, tested.stderr)


def test_a_run_past_the_qoss_submit_limit_is_refused_before_any_job(
        slurm_cluster: CommandSlurmClient, user_tmp: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """QOS `few` lets a user have 4 jobs pending or running, and its users together 5. A
    4-model sweep is 5 jobs (its array's elements and the aggregation): sbatch queued the
    array and refused the aggregation, so the sweep ran without its table. hpceval counts
    them, and the queued jobs of that QOS that count (the user's; every user's for the group
    limit), and refuses the run before writing or submitting anything."""
    monkeypatch.setenv("HPCEVAL_TASKS_PATH", str(ASK_HARNESS))
    monkeypatch.setenv("XDG_CACHE_HOME", str(user_tmp / "cache"))
    run = yaml.safe_load(run_file(user_tmp).read_text(encoding="utf-8"))
    run["execution"].update({"partition": "debug", "qos": "few"})
    run["models"] = [{"name": f"m{i}"} for i in range(4)]
    path = user_tmp / "sweep.yaml"
    path.write_text(yaml.safe_dump(run), encoding="utf-8")

    def few_jobs() -> list[str]:
        return subprocess.run(["squeue", "-h", "-r", "-q", "few", "-o", "%i"],
                              capture_output=True, text=True, check=True).stdout.split()

    refused = hpceval("submit", str(path))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "execution.qos" in refused.stderr and "this run submits 5 jobs (4 model jobs, 1 " \
        "aggregation job); QOS few's MaxSubmitJobsPerUser is 4" in refused.stderr, (
        refused.stderr)
    assert not (user_tmp / "runs").exists() and few_jobs() == []

    held = [as_user(USER, "sbatch", "--parsable", "--hold", "-p", "debug", "-q", "few", "-t",
                    "1", "-o", "/dev/null", "--wrap", "true").stdout.strip() for _ in range(2)]
    try:
        run["models"] = run["models"][:2]
        path.write_text(yaml.safe_dump(run), encoding="utf-8")
        waiting = hpceval("submit", str(path))
        assert waiting.returncode == 2, waiting.stdout + waiting.stderr
        assert "2 of your jobs in the queue already count against it" in waiting.stderr, (
            waiting.stderr)
        assert sorted(few_jobs()) == sorted(held)
    finally:
        subprocess.run(["scancel", *held], check=False)

    # QOS few's GrpSubmitJobs (5) counts every user's jobs: bob's 4 leave room for one, and a
    # 2-model sweep is 3 jobs (within the per-user limit: none of bob's are alice's)
    others = [as_user(OTHER, "sbatch", "--parsable", "--hold", "-p", "debug", "-q", "few", "-t",
                      "1", "-o", "/dev/null", "--wrap", "true").stdout.strip()
              for _ in range(4)]
    try:
        assert all(others) and sorted(few_jobs()) == sorted(others), others
        path.write_text(yaml.safe_dump(run), encoding="utf-8")  # the 2-model sweep again
        crowded = hpceval("submit", str(path))
        assert crowded.returncode == 2, crowded.stdout + crowded.stderr
        assert "QOS few's GrpSubmitJobs (every user's jobs together) is 5, and 4 jobs in the " \
            "queue already count against it" in crowded.stderr, crowded.stderr
        assert "MaxSubmitJobsPerUser" not in crowded.stderr, crowded.stderr
        assert sorted(few_jobs()) == sorted(others)
    finally:
        subprocess.run(["scancel", *others], check=False)


def test_a_run_past_its_accounts_group_limit_is_refused_before_any_job(
        slurm_cluster: CommandSlurmClient, user_tmp: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Account lab caps its group's queue: GrpSubmitJobs 4, every user's jobs under lab and its
    sub-accounts together; alice works under lab-nlp, bob under lab-vision. Her association's
    row shows no such limit (sacctmgr shows a Grp limit only on the account that sets it), so
    sbatch took her sweep's array and refused its aggregation (AssocGrpSubmitJobsLimit).
    hpceval reads the account tree, counts bob's jobs, and refuses the run first."""
    monkeypatch.setenv("HPCEVAL_TASKS_PATH", str(ASK_HARNESS))
    monkeypatch.setenv("XDG_CACHE_HOME", str(user_tmp / "cache"))
    run = yaml.safe_load(run_file(user_tmp).read_text(encoding="utf-8"))
    run["execution"].update({"partition": "debug", "account": "lab-nlp"})
    run["models"] = [{"name": f"m{i}"} for i in range(2)]  # 3 jobs: 2 elements, aggregation
    path = user_tmp / "sweep.yaml"
    path.write_text(yaml.safe_dump(run), encoding="utf-8")

    def lab_jobs() -> list[str]:
        return subprocess.run(["squeue", "-h", "-r", "-A", "lab-nlp,lab-vision", "-o", "%i"],
                              capture_output=True, text=True, check=True).stdout.split()

    others = [as_user(OTHER, "sbatch", "--parsable", "--hold", "-p", "debug", "-A",
                      "lab-vision", "-t", "1", "-o", "/dev/null", "--wrap", "true")
              for _ in range(2)]
    held = [done.stdout.strip() for done in others]
    try:
        assert all(done.returncode == 0 for done in others), others
        refused = hpceval("submit", str(path))
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "execution.account" in refused.stderr and "this run submits 3 jobs (2 model " \
            "jobs, 1 aggregation job); account lab's GrpSubmitJobs (every user's jobs under " \
            "account lab and the accounts below it (lab-nlp, lab-vision) together) is 4, and 2 " \
            "jobs in the queue already count against it" in refused.stderr, refused.stderr
        assert not (user_tmp / "runs").exists() and sorted(lab_jobs()) == sorted(held)
        # Slurm's own answer to the third job: the limit hpceval read is the one it enforces
        mine = [as_user(USER, "sbatch", "--parsable", "--hold", "-p", "debug", "-A", "lab-nlp",
                        "-t", "1", "-o", "/dev/null", "--wrap", "true") for _ in range(3)]
        held += [done.stdout.strip() for done in mine if done.returncode == 0]
        assert [done.returncode == 0 for done in mine] == [True, True, False], mine
        assert "AssocGrpSubmitJobsLimit" in mine[2].stderr, mine[2].stderr
    finally:
        subprocess.run(["scancel", *held], check=False)


def test_the_submit_shells_sbatch_variables_do_not_move_the_job(
        slurm_cluster: CommandSlurmClient, user_tmp: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A site module's SBATCH_PARTITION and a user's SBATCH_TIMELIMIT override a script's own
    #SBATCH lines in sbatch: the job runs where and as long as the profile says (as render
    shows), not in `short` for one minute; an unset key's variable still applies and is
    checked (tests/backends/slurm/test_submit_environment.py)."""
    import os

    monkeypatch.setenv("HPCEVAL_TASKS_PATH", str(ASK_HARNESS))
    monkeypatch.setenv("XDG_CACHE_HOME", str(user_tmp / "cache"))
    monkeypatch.setenv("SBATCH_PARTITION", "short")
    monkeypatch.setenv("SBATCH_TIMELIMIT", "1")
    path = run_file(user_tmp)
    out = hpceval("submit", str(path), "-o", "execution.partition=debug",
                  "-o", "execution.walltime=00:40:00")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "not applied from your environment: SBATCH_PARTITION=short, SBATCH_TIMELIMIT=1" in (
        out.stderr), out.stderr
    # this run's jobs only: alice's other runs of the session (her run index) are not its
    job_ids = read_jobs(submitted(out)[1]).ids
    assert job_ids, out.stdout
    try:
        placed = subprocess.run(["squeue", "--states=all", "-h", "-o", "%P|%l", "-j",
                                 ",".join(job_ids)], capture_output=True, text=True,
                                check=True, env={k: v for k, v in os.environ.items()
                                                 if not k.startswith("SBATCH_")}).stdout
        assert {line for line in placed.splitlines() if line} <= {"debug|40:00"}, placed
        assert placed.strip(), job_ids
    finally:
        subprocess.run(["scancel", *job_ids], check=False)

    # unset in the profile: the environment's partition is the job's, and its limit is checked
    over = hpceval("submit", str(path), "-o", "execution.partition=null",
                   "-o", "execution.walltime=00:40:00")
    assert over.returncode == 2, over.stdout + over.stderr
    assert "(from your environment: SBATCH_PARTITION=short)" in over.stderr, over.stderr
