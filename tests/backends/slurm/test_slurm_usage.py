"""GPU-hours on the real dev cluster: what sacct says a job held (AllocTRES) x Elapsed.

The dev cluster's nodes advertise fake gpu:4 GRES, so a GPU request is accounted like on a real
GPU cluster. One small job (2 GPUs on 1 node, ~3 s), asked through the Slurm backend's `usage`
(the poller status uses) as cost accounting asks it.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hpceval.backends.slurm.backend import SlurmBackend
from hpceval.backends.slurm.client import CommandSlurmClient
from hpceval.runs.cost import RunJob, UsageBook, collect_usage

pytestmark = pytest.mark.slurm


def test_alloc_tres_and_elapsed_give_gpu_hours(slurm_cluster: CommandSlurmClient,
                                               tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPCEVAL_CACHE_DIR", str(tmp_path / "cache"))
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\nsleep 3\n")
    submitted = time.time()
    job_id = slurm_cluster.submit(script, extra_args=["-N", "1", "--gres=gpu:2", "-t", "2",
                                                      "-o", str(tmp_path / "out.log"),
                                                      "-J", "hpceval-usage"])
    backend = SlurmBackend(slurm_cluster, min_interval_s=0.5)
    book = UsageBook()
    wanted = [RunJob("m", job_id, submitted, backend.name, tmp_path)]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        collect_usage(lambda kind: backend, wanted, book, ask=True)
        usage = book.get(wanted[0])
        if usage is not None and usage.final:
            break
        time.sleep(1)
    poller = backend.poller
    assert usage is not None and usage.final, poller.status(job_id)
    assert poller.sacct_calls >= 1
    record = poller.record(job_id)
    assert record is not None and record.state == "COMPLETED"
    assert (usage.gpus, usage.nodes) == (2, 1)
    assert 3 <= usage.elapsed_s <= 30
    assert usage.gpu_hours == pytest.approx(2 * usage.elapsed_s / 3600)
    # ended: cached, so a fresh book knows it without asking sacct
    assert UsageBook().missing(wanted) == []
