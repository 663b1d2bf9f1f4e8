"""The Slurm env.j2 partial inside a real array job of the dev cluster: the in-job Python
(hpceval.jobenv, what collect's manifest and the cache lease read) sees Slurm's facts under
hpceval's names, for each element. ~5 s."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from hpceval.backends import backend_for
from hpceval.backends.slurm.client import CommandSlurmClient
from hpceval.render.quoting import render_template

pytestmark = pytest.mark.slurm


def test_an_array_element_reads_its_facts_through_jobenv(slurm_cluster: CommandSlurmClient,
                                                          tmp_path: Path) -> None:
    env_block = render_template(f"{backend_for('slurm').partials}/env.j2", {})
    read = ("import dataclasses, json; from hpceval.jobenv import JobEnv; "
            "print(json.dumps(dataclasses.asdict(JobEnv.read())))")
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/bash\n#SBATCH --job-name=hpceval-jobenv\n#SBATCH --time=1\n#SBATCH --array=0-1\n"
        f"#SBATCH --output={tmp_path}/out-%a.log\n{env_block}\n"
        f"exec {sys.executable} -c '{read}'\n")
    base = slurm_cluster.submit(script)
    deadline = time.monotonic() + 90
    outs = [tmp_path / f"out-{i}.log" for i in (0, 1)]
    while not all(p.is_file() and p.read_text().strip() for p in outs):
        assert time.monotonic() < deadline, "the array job did not write its facts"
        time.sleep(1)
    facts = [json.loads(p.read_text().strip().splitlines()[-1]) for p in outs]
    for index, seen in enumerate(facts):
        assert seen["array_job_id"] == base and seen["array_index"] == str(index)
        assert seen["job_id"] and seen["node_list"] in ("node1", "node2", "node3")
        assert seen["restart_count"] == "0" and seen["cluster"] and seen["partition"]
    assert facts[0]["job_id"] != facts[1]["job_id"]  # each element has its own id
