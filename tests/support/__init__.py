"""Shared test support, importable from every test as ``support`` (pyproject.toml's pytest
``pythonpath = ["tests"]``): no test puts a folder on sys.path by hand.

* ``support.slurm``: the one recording Slurm client double, FakeSlurm, and RecordedSlurm (sacct
  from output recorded on the dev cluster);
* ``support.runs``: the controller's set-up (tiny catalogue, isolated caches, run files, finished
  tasks) and its fixtures, imported by the conftest.py of tests/runs, tests/results, tests/watch;
* ``support.reports``, ``support.checkpoints``, ``support.watches``: a finished sweep for the
  report, one run per training step, checkpoint folders and a started watch;
* ``support.nel_examples``: the NeMo Evaluator launcher examples' outcomes and checks;
* ``support.ports``: a free port; ``support.lm_eval_env``: the offline lm-eval task and oracle
  set-up (harness, integration);
* the oracle's answer key stays ``tests/fakes/answer_key.py``, beside the server script that
  imports it when a job runs it; tests import it as ``fakes.answer_key``.
"""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
FAKES = TESTS / "fakes"
