"""Shared test support, importable from every test as ``support`` (pyproject.toml's pytest
``pythonpath = ["tests"]``): no test puts a folder on sys.path by hand.

* ``support.lm_eval_env``: the offline lm-eval task and oracle set-up (harness, integration);
* the oracle's answer key stays ``tests/fakes/answer_key.py``, beside the server script that
  imports it when a job runs it; tests import it as ``fakes.answer_key``.
"""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
FAKES = TESTS / "fakes"
