"""The scheduler's in-job dialect lives in the backend's template partials (issue 20, item 1).

The rule enforced here, for every file under templates/ outside templates/backends/slurm/:
- no Slurm command as a word, in any case (sbatch, sacct, scontrol, squeue, scancel, srun):
  a match preceded by "." is a file name's suffix (job.sbatch, sweep.sbatch.j2) and allowed,
  one inside a longer identifier (any_srun, SERVER_SRUN) is not a word and allowed;
- no Slurm variable: nothing that starts with SLURM_ or SLURMD_.
The neutral templates include the backend's partials by the name the render context gets from
the backend (`backend.partials`), and read only the variables its env.j2 sets (HPCEVAL_JOB_ID,
HPCEVAL_NODELIST, HPCEVAL_ARRAY_INDEX, HPCEVAL_RESTART_COUNT).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from hpceval import jobenv
from hpceval.backends import BACKENDS, backend_for
from hpceval.jobenv import JobEnv
from hpceval.render.quoting import partials_folder, render_template
from hpceval.resources import templates_dir

TEMPLATES = templates_dir()
GOLDEN = Path(__file__).parents[1] / "golden"
SLURM_COMMAND = re.compile(r"(?<![\w.])(sbatch|sacct|scontrol|squeue|scancel|srun)(?!\w)",
                           re.IGNORECASE)
SLURM_VARIABLE = re.compile(r"(?<!\w)SLURMD?_")
INCLUDED = re.compile(r"""\{%-?\s*include\s+backend\.partials\s*~\s*["']/([\w.]+)["']""")


def offenders(text: str) -> list[str]:
    return [f"{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1)
            if SLURM_COMMAND.search(line) or SLURM_VARIABLE.search(line)]


def test_the_rule_catches_what_it_should() -> None:
    # the patterns themselves: a test of the rule that could pass on an empty tree otherwise
    assert offenders('x=$(sbatch --parsable "$s")') and offenders("exec srun -w n1 true")
    assert offenders("# #SBATCH --signal") and offenders('echo "${SLURM_JOB_ID:-}"')
    assert offenders('getent ahostsv4 "$SLURMD_NODENAME"') and offenders("SCONTROL show")
    assert not offenders("from templates/job.sbatch.j2; JOB_SCRIPT=/r/job.sbatch")
    assert not offenders('{% if any_srun %}SERVER_SRUN=(a b){% endif %}')


def test_no_template_names_slurm_outside_the_slurm_partials() -> None:
    slurm = TEMPLATES / backend_for("slurm").partials
    found = {str(path.relative_to(TEMPLATES)): bad
             for path in sorted(TEMPLATES.rglob("*.j2"))
             if slurm not in path.parents and (bad := offenders(path.read_text()))}
    assert found == {}


def test_every_backend_has_every_partial_the_templates_include() -> None:
    included = {name for path in TEMPLATES.rglob("*.j2")
                for name in INCLUDED.findall(path.read_text())}
    assert {"env.j2", "discover.j2", "launch.j2", "successor.j2", "preempted.j2",
            "detach.j2"} <= included, included
    for kind in BACKENDS:  # a plugin's (where installed) from the folder its package ships
        folder = partials_folder(backend_for(kind).partials)
        assert {p.name for p in folder.iterdir() if p.name.endswith(".j2")} == included, kind


@pytest.mark.parametrize("golden", sorted(GOLDEN.glob("local__*.sbatch")), ids=lambda p: p.stem)
def test_a_local_job_script_runs_no_slurm_command(golden: Path) -> None:
    """The golden local job scripts (tests/render/test_golden.py checks them against the
    renderer byte for byte): below the header, nothing of Slurm's, so a local run started
    inside an allocation does not start its servers with srun."""
    text = golden.read_text()
    body = text[text.index("\n\n"):]
    assert offenders(body) == [], golden.name
    assert "export HPCEVAL_JOB_ID=\n" in body  # the local env.j2: no job id


SLURM_SETS = {"SLURM_JOB_ID": "17", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_ARRAY_JOB_ID": "16",
              "SLURM_ARRAY_TASK_ID": "1", "SLURM_RESTART_COUNT": "2",
              "SLURM_CLUSTER_NAME": "dev", "SLURM_JOB_PARTITION": "gpu"}


@pytest.mark.parametrize(("kind", "expected"), [
    ("slurm", JobEnv("17", "n[1-2]", "16", "1", "2", "dev", "gpu")),
    ("local", JobEnv(restart_count="0")),  # inside an allocation, still none of its facts
])
def test_each_env_partial_exports_the_names_the_job_reads(kind: str, expected: JobEnv) -> None:
    """env.j2 and hpceval.jobenv name the same variables: every backend's partial exports
    exactly jobenv.NAMES (so the in-job Python sees them), from its scheduler's variables."""
    text = render_template(f"{backend_for(kind).partials}/env.j2", {})
    assert re.findall(r"^\s*export (\w+)=", text, re.MULTILINE) == list(jobenv.NAMES)
    env = {"PATH": os.environ["PATH"], **SLURM_SETS}
    out = subprocess.run(["bash", "-c", text + "\nenv -0"], env=env, capture_output=True,
                         check=True).stdout.decode()
    seen = dict(line.split("=", 1) for line in out.split("\0") if "=" in line)
    assert JobEnv.read(seen) == expected
