"""state.json is one typed record (hpceval.watch.state.WatchState) with one reader and one
writer, and a damaged or foreign file fails as run.json does: the file, what is wrong, the fix.

Before, every tick, stop, resume and status handled the file as a plain dict (state["ticks"],
entry.get("run_dir"), ...), and the errors said the path in four different word orders.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hpceval.contract import WATCH_STATE_FILE
from hpceval.errors import HpcevalError
from hpceval.watch import state as st


def _state() -> st.WatchState:
    entry = st.CheckpointEntry("/ckpts/step_10", 10, st.SUBMITTED, first_seen=1.0, attempts=1,
                               claimed_by="77", run_id="r1", run_dir="/out/r1",
                               job_ids=["5"], model="solo")
    return st.WatchState(checkpoints={"step_10": entry}, ticks=[st.TickEntry("6", "slurm",
                                                                             2.0, 62.0)],
                         ignored=["final"], foreign=[st.ForeignEntry("step_9", 1001, "eve")],
                         last_tick=st.LastTick(3.0, "6", [], [], "running"))


def test_the_state_round_trips_through_its_one_writer_and_reader(tmp_path: Path) -> None:
    state = _state()
    st.save_state(tmp_path, state)
    assert sorted(p.name for p in tmp_path.iterdir()) == [WATCH_STATE_FILE,
                                                          WATCH_STATE_FILE + st.BACKUP_SUFFIX]
    assert st.load_state(tmp_path) == state  # updated_at is the one save_state set
    raw = json.loads((tmp_path / WATCH_STATE_FILE).read_text())
    # the file keeps the words it always had (integration tests and users read it as JSON)
    entry = raw["checkpoints"]["step_10"]
    assert (entry["status"], entry["job_ids"], entry["run_dir"]) == ("submitted", ["5"],
                                                                     "/out/r1")
    assert "fingerprint" not in entry  # not known (marker mode): not written
    assert raw["ticks"] == [{"id": "6", "kind": "slurm", "submitted_at": 2.0, "begin_at": 62.0}]
    assert raw["foreign"] == [{"name": "step_9", "owner": 1001, "owner_name": "eve"}]
    assert raw["last_tick"]["training"] == "running" and raw["schema"] == st.STATE_SCHEMA
    assert state.counts() == {st.SUBMITTED: 1}


@pytest.mark.parametrize(("text", "says"), [
    (None, "no such file"),
    ("{", "not valid JSON"),
    ("[1, 2]", "not a watch state (not a JSON object)"),
    ('{"schema": 2, "status": "watching", "checkpoints": {}, "ticks": []}', "schema 2"),
    ('{"schema": 1, "status": "watching", "checkpoints": {"a": {"status": "pending"}}, '
     '"ticks": []}', "no 'path' where a tick writes one"),
    ('{"schema": 1, "status": "watching", "checkpoints": {"a": {"status": "pending", '
     '"path": "/a", "step": "ten"}}, "ticks": []}', "not a watch state"),
    ('{"schema": 1, "status": "watching", "checkpoints": {}, "ticks": [{"kind": "slurm"}]}',
     "no 'id'"),
])
def test_one_error_names_the_file_and_the_fix(tmp_path: Path, text: str | None,
                                              says: str) -> None:
    path = tmp_path / WATCH_STATE_FILE
    if text is not None:
        path.write_text(text)
    with pytest.raises(st.WatchStateError) as caught:
        st.load_state(tmp_path)
    assert isinstance(caught.value, HpcevalError) and caught.value.exit_code == 1
    assert caught.value.message.startswith(f"{path}: ") and says in caught.value.message
    assert f"{path}{st.BACKUP_SUFFIX}" in caught.value.fix
    assert "hpceval watch resume" in caught.value.fix


def test_only_the_state_module_writes_state_json() -> None:
    root = Path(__file__).parents[2]
    writers = [f"{p.relative_to(root)}:{n}" for p in (root / "hpceval").rglob("*.py")
               if p.name != "state.py"
               for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
               if re.search(r"write\w*\(.*(WATCH_STATE_FILE|state_path|state\.json)", line)]
    assert writers == []
