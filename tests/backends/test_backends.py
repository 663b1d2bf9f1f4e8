"""The execution-backend seam: one place chooses the backend, nothing else asks "is it local?"."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.slurm import FakeSlurm

from hpceval.backends import BackendFiles, JobQuery, JobRequest, backend_for
from hpceval.backends.base import JobEntry
from hpceval.backends.local import LocalBackend
from hpceval.backends.slurm.backend import SlurmBackend
from hpceval.backends.slurm.states import Phase
from hpceval.render.quoting import render_template

PACKAGE = Path(__file__).parents[2] / "hpceval"
# A test of an execution type written as a string comparison, e.g. `kind == "local"`.
_KIND_TEST = re.compile(r"""(kind|type)\s*[!=]=\s*["'](local|slurm)["']""")
# A Slurm command named as a word: not a file's suffix (job.sbatch), not part of a longer name
# (sbatch_extra_flags, squeue_calls, sacctmgr). Messages that must name one get the text from
# the backend (hpceval/backends/slurm/commands.py). Python only: the Slurm-only template
# partials are checked with the templates.
_SLURM_COMMAND = re.compile(r"(?<![\w.-])(sbatch|sacct|scontrol|squeue)(?![\w-])")


def test_no_execution_type_test_outside_the_backends() -> None:
    offenders = [f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}"
                 for path in PACKAGE.rglob("*.py")
                 if "backends" not in path.parts
                 for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if _KIND_TEST.search(line)]
    assert offenders == []


def test_no_slurm_command_named_outside_the_backends() -> None:
    words = ["one sacct call", "(squeue --me)", "sbatch's", "`scontrol show hostnames`"]
    others = ["job.sbatch", "sbatch_extra_flags", "fake.squeue_calls", "sacctmgr", "--sbatch-x"]
    assert [bool(_SLURM_COMMAND.search(w)) for w in words + others] == \
        [True] * len(words) + [False] * len(others)
    offenders = [f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}"
                 for path in sorted(PACKAGE.rglob("*.py"))
                 if "backends" not in path.relative_to(PACKAGE).parts
                 for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if _SLURM_COMMAND.search(line)]
    assert offenders == []


# A scheduler's own environment variable (SLURM_JOB_ID, SLURMD_NODENAME): the in-job code reads
# hpceval's names instead (hpceval.jobenv), which each backend's env.j2 exports.
_SLURM_VARIABLE = re.compile(r"(?<!\w)SLURMD?_")
# Not yet behind the backend: pyxis is srun's plugin and its runtime still writes srun's
# harness step itself (issue 20, item 5: the backend's launch partial is to write it).
_SLURM_VARIABLE_PENDING = {Path("runtimes/pyxis.py")}


def test_no_slurm_variable_named_outside_the_backends() -> None:
    assert _SLURM_VARIABLE.search('os.environ.get("SLURM_JOB_ID")')
    assert _SLURM_VARIABLE.search('"$SLURMD_NODENAME"')
    assert not _SLURM_VARIABLE.search("HPCEVAL_SLURM_X") and not _SLURM_VARIABLE.search("SLURM")
    offenders = [f"{rel}:{n}: {line.strip()}"
                 for path in sorted(PACKAGE.rglob("*.py"))
                 if "backends" not in (rel := path.relative_to(PACKAGE)).parts
                 and rel not in _SLURM_VARIABLE_PENDING
                 for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if _SLURM_VARIABLE.search(line)]
    assert offenders == []


def test_backend_for_knows_both_execution_types_and_refuses_others() -> None:
    assert isinstance(backend_for("slurm"), SlurmBackend)
    assert isinstance(backend_for("local"), LocalBackend)
    with pytest.raises(ValueError, match=r"unknown execution type 'lepton'.*slurm, local"):
        backend_for("lepton")


def test_slurm_submit_passes_elements_limit_and_dependency(tmp_path: Path) -> None:
    fake = FakeSlurm()
    backend = SlurmBackend(fake)
    (main,) = backend.submit(tmp_path, JobRequest("sweep.sbatch", (1, 3), sweep=True,
                                                  elements=(1, 3), max_parallel=2,
                                                  reason="resume"))
    (agg,) = backend.submit(tmp_path, JobRequest("aggregate.sbatch", after=(main.id,),
                                                 role="aggregate"))
    assert fake.submits[0]["extra_args"] == ["--array=1,3%2"]
    assert fake.submits[0]["dependency"] is None
    assert fake.submits[1] == {"script": tmp_path / "aggregate.sbatch", "extra_args": [],
                               "dependency": f"afterany:{main.id}", "id": agg.id,
                               "script_args": []}
    assert (main.kind, main.array, main.models, main.reason) == ("slurm", True, (1, 3), "resume")
    assert (agg.role, agg.models, agg.array) == ("aggregate", (), False)


def test_slurm_states_of_many_jobs_cost_one_sacct(tmp_path: Path) -> None:
    fake = FakeSlurm()
    backend = SlurmBackend(fake)
    array = JobEntry("500", "slurm", "main", tuple(range(50)), True, 0.0)
    singles = [JobEntry(str(600 + i), "slurm", "main", (0,), False, 0.0) for i in range(50)]
    fake.states.update({f"500_{i}": "RUNNING" for i in range(50)})
    fake.states.update({e.id: "PENDING" for e in singles})
    queries = [JobQuery(array, tmp_path, f"m{i}", i) for i in range(50)]
    queries += [JobQuery(e, tmp_path / e.id, "m", 0) for e in singles]
    states = backend.states(queries, force=True)
    assert len(fake.sacct_calls) == 1
    assert [s.phase for s in states] == [Phase.RUNNING] * 50 + [Phase.QUEUED] * 50
    backend.states(queries)  # within the rate limit: answered from what it knows
    assert len(fake.sacct_calls) == 1


def test_only_the_slurm_backend_adds_an_aggregation_job(tmp_path: Path) -> None:
    files = BackendFiles(tmp_path, (("a", "models/a/job.sh"), ("b", "models/b/job.sh")),
                       "00:10:00", 60, "/usr/bin/python3", aggregate="#!/bin/bash\n",
                       render=render_template)
    assert backend_for("slurm").scripts(files) == {"aggregate.sbatch": "#!/bin/bash\n"}
    local = backend_for("local").scripts(files)
    assert list(local) == ["local.sh"]
    assert "-m hpceval.job aggregate" in local["local.sh"]  # the runner aggregates


def test_log_paths_follow_each_backend(tmp_path: Path) -> None:
    array = JobEntry("7", "slurm", "main", (2,), True, 0.0)
    single = JobEntry("8", "slurm", "main", (0,), False, 0.0)
    local = JobEntry("local-1", "local", "main", (0,), False, 0.0)
    slurm = backend_for("slurm")
    assert slurm.log_path(tmp_path, "m", 2, array) == tmp_path / "logs" / "slurm-7_2.log"
    assert slurm.log_path(tmp_path, "m", 0, single) == tmp_path / "models/m/slurm-8.log"
    assert (backend_for("local").log_path(tmp_path, "m", 0, local)
            == tmp_path / "models/m/local.log")
    # a job whose script writes its log in a folder of its own (a sweep's judge job)
    assert slurm.own_log(tmp_path / "auxiliary/j", single) == tmp_path / "auxiliary/j/slurm-8.log"
    assert backend_for("local").own_log(tmp_path, local) == tmp_path / "local.log"


def test_the_header_writes_the_log_the_backend_reads() -> None:
    """One name for a Slurm job's log: the --output pattern of the header (%j, %A_%a filled
    in as sbatch does) is the file the backend's log_path and own_log read."""
    from hpceval.backends.slurm.formats import log_file

    assert log_file("%j") == "slurm-%j.log" and log_file("%A", "%a") == "slurm-%A_%a.log"
    assert log_file("8") == "slurm-8.log" and log_file("7", 2) == "slurm-7_2.log"


def test_submitit_loads_only_when_job_states_are_asked() -> None:
    code = ("import sys\n"
            "import hpceval.config.checks, hpceval.render, hpceval.runs.submit\n"
            "import hpceval.runs.control, hpceval.runs.state\n"
            "from hpceval.backends import backend_for\n"
            "backend_for('slurm')\n"
            "print('submitit' in sys.modules)\n"
            "from hpceval.backends.slurm import SacctPoller\n"
            "print('submitit' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": str(PACKAGE.parent)})
    assert out.stdout.split() == ["False", "True"]


@pytest.mark.parametrize("state", ["NODE_FAIL", "PREEMPTED"])
def test_a_job_slurm_may_requeue_under_its_id_is_asked_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, state: str) -> None:
    """Finished states are cached (job-states.json) so that status never asks sacct twice
    about a finished job; but Slurm requeues a NODE_FAIL or PREEMPTED job under the same id
    (auto_resume's --requeue): cached, it would read FAILED forever, and resume would submit
    a duplicate beside the requeued job."""
    monkeypatch.setenv("HPCEVAL_CACHE_DIR", str(tmp_path / "cache"))
    fake = FakeSlurm()
    entry = JobEntry("700", "slurm", "main", (0,), False, 0.0)
    query = JobQuery(entry, tmp_path / "run", "m", 0)
    fake.states["700"] = state
    [status] = SlurmBackend(fake).states([query], force=True)
    assert status.phase is Phase.FAILED
    fake.states["700"] = "RUNNING"  # requeued, started again
    [status] = SlurmBackend(fake).states([query], force=True)
    assert status.phase is Phase.RUNNING
    # a job that really ended stays cached: no sacct for it again
    fake.states["700"] = "COMPLETED"
    SlurmBackend(fake).states([query], force=True)
    calls = len(fake.sacct_calls)
    fake.states["700"] = "RUNNING"
    [status] = SlurmBackend(fake).states([query], force=True)
    assert status.phase is Phase.DONE and len(fake.sacct_calls) == calls
