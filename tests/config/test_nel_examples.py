"""Every NeMo Evaluator launcher example (tests/data/nel_examples, see its README) with the
``-o`` overrides its header tells users to pass: it renders with the launcher's meaning, or is
refused with exit 2 and words that say what hpceval does not support and what to do.

The examples are pinned by family: the local executor's (test_nel_examples_local.py), the Slurm
executor's (test_nel_examples_slurm.py), the Nemotron folder's (test_nel_examples_nemotron.py)
and Lepton's (here, all refused); the machinery is support.nel_examples. Here: every file is
pinned once, the headers say what DOCUMENTED says, and the tally.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.nel_examples import DOCUMENTED, EXAMPLES, Refused, Renders, example_outcome
from test_nel_examples_local import OUTCOMES as LOCAL
from test_nel_examples_nemotron import OUTCOMES as NEMOTRON
from test_nel_examples_slurm import OUTCOMES as SLURM

LEPTON = Refused(("Lepton deployments are out of scope for hpceval",
                  "use execution: slurm/default or local"))
LEPTON_OUTCOMES: dict[str, Renders | Refused] = {
    "lepton_basic.yaml": LEPTON,
    "lepton_nim.yaml": LEPTON,
    "lepton_vllm.yaml": LEPTON,
}
ALL: dict[str, Renders | Refused] = {**LEPTON_OUTCOMES, **LOCAL, **SLURM, **NEMOTRON}


@pytest.mark.parametrize("name", sorted(LEPTON_OUTCOMES))
def test_example_outcome(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    example_outcome(name, LEPTON_OUTCOMES[name], tmp_path, monkeypatch)


def test_every_example_is_pinned() -> None:
    files = {str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*.yaml")}
    assert len(files) == 32
    assert set(DOCUMENTED) == files and set(ALL) == files
    # each file in one family's table only
    assert sum(len(f) for f in (LEPTON_OUTCOMES, LOCAL, SLURM, NEMOTRON)) == len(files)


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_documented_overrides_are_the_headers(name: str) -> None:
    header = (EXAMPLES / name).read_text().split("\ndefaults:")[0]
    for override in DOCUMENTED[name]:
        assert f"-o {override}" in header, override


def test_tally() -> None:
    """The counts the issue's closing note reports (as documented, before any 'then')."""
    renders = sorted(n for n, o in ALL.items() if isinstance(o, Renders))
    assert len(renders) == 19, renders
    assert len(ALL) - len(renders) == 13
