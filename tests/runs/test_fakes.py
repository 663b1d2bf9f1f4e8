"""The fakes other tests rely on must themselves be right: the recording sbatch hands out one id
per call under concurrency, and job_python runs every `hpceval.job` command the job script
uses (compaction included)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from support import FAKES

from hpceval.job.cache import ResponseCache


def test_recording_sbatch_gives_unique_ids_to_concurrent_calls(tmp_path: Path) -> None:
    script = tmp_path / "job.sbatch"
    script.write_text("#!/bin/bash\n")
    log = tmp_path / "sbatch.log"
    env = {**os.environ, "FAKE_SBATCH_LOG": str(log)}

    def call(_: int) -> str:
        done = subprocess.run([str(FAKES / "recording_sbatch" / "sbatch"), "--parsable",
                               str(script)], env=env, capture_output=True, text=True, check=True)
        return done.stdout.strip()

    with ThreadPoolExecutor(24) as pool:
        ids = list(pool.map(call, range(24)))
    assert len(set(ids)) == 24, sorted(ids)  # was 18 distinct ids for 24 calls
    assert len(log.read_text().splitlines()) == 24
    assert sorted(int(i) for i in ids) == list(range(700001, 700025))


def test_job_python_runs_cache_compaction(tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    for n in range(2):  # two proxies' shards
        cache = ResponseCache(cache_dir)
        cache.put(bytes([n]) * 32, "/v1/completions", 200, b'{"choices":[%d]}' % n)
        cache.close()
    assert len(list(cache_dir.glob("shard-*.jsonl"))) == 2
    env = {**os.environ, "HPCEVAL_TEST_PYTHON": sys.executable,
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run([str(FAKES / "job_python"), "-m", "hpceval.job", "compact-cache",
                           str(cache_dir)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.split("compact-cache: ", 1)[1])
    assert result["entries"] == 2 and result["shards_merged"] == 2
    assert len(list(cache_dir.glob("shard-*.jsonl"))) == 1
