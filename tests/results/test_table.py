"""The results table without runs: which run counts when two have the same submission time,
the leaderboard's shape, and each text format exactly (the runs behind them are in
test_compare.py and test_results.py)."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import pytest

from hpceval.results.table import COLUMNS, counting_rows, leaderboard, render


def row(invocation: str, model: str, task: str, value: float, *, metric: str = "acc",
        created: float | None = 1.0, primary: bool = True) -> dict[str, Any]:
    values: dict[str, Any] = dict.fromkeys(COLUMNS)
    values.update(invocation_id=invocation, model=model, task=task, metric=metric,
                  value=value, primary=primary, created_at=created, harness="h",
                  run_dir=f"/runs/{invocation}", task_dir=f"/runs/{invocation}/t")
    return values


def frame(*rows: dict[str, Any]) -> Any:
    return pd.DataFrame(list(rows), columns=COLUMNS)


def test_runs_submitted_in_the_same_second_count_by_invocation_id() -> None:
    """created_at ties (or runs without one): the invocation id, which starts with the time,
    decides; every row of the counting run stays, none of the other's."""
    rows = frame(row("20261202-100000-b", "m", "t", 0.7),
                 row("20261202-100000-b", "m", "t", 0.6, metric="acc_norm", primary=False),
                 row("20261201-090000-a", "m", "t", 0.2),
                 row("20261201-090000-a", "other", "t", 0.4))
    for order in (rows, rows.iloc[::-1]):
        chosen = counting_rows(order)
        got = sorted(zip(chosen["model"], chosen["invocation_id"], chosen["metric"],
                         strict=True))
        assert got == [("m", "20261202-100000-b", "acc"), ("m", "20261202-100000-b", "acc_norm"),
                       ("other", "20261201-090000-a", "acc")]
    assert counting_rows(frame()).empty


def test_the_leaderboard_is_one_row_per_model_sorted_by_mean() -> None:
    board = leaderboard(frame(row("r", "a", "t1", 0.2), row("r", "a", "t2", 0.4),
                              row("r", "b", "t1", 0.9), row("r", "b", "t2", 0.7),
                              row("r", "b", "t2", 0.1, metric="f1", primary=False)))
    assert list(board.index) == ["b", "a"]
    assert list(board.columns) == ["t1", "t2", "mean", "run"]
    assert board.columns.name is None and board.index.name == "model"
    assert board.loc["a", "mean"] == pytest.approx(0.3)
    by_f1 = leaderboard(frame(row("r", "b", "t2", 0.7), row("r", "b", "t2", 0.1, metric="f1",
                                                           primary=False)), metric="f1")
    assert by_f1.loc["b", "t2"] == pytest.approx(0.1)
    assert leaderboard(frame()).empty


def test_the_leaderboard_names_the_run_behind_each_number() -> None:
    """One run per model: its id; a model whose tasks count from several runs (the newest
    that finished each): each run with the tasks it gave."""
    board = leaderboard(frame(row("20261201-a", "a", "t1", 0.2), row("20261201-a", "a", "t2", 0.4),
                              row("20261203-c", "a", "t2", 0.5, created=3.0),
                              row("20261202-b", "b", "t1", 0.9, created=2.0),
                              row("20261202-b", "b", "t2", 0.7, created=2.0)))
    assert board.loc["a", "t2"] == pytest.approx(0.5)  # the newer run counts
    assert board.loc["a", "run"] == "20261201-a (t1); 20261203-c (t2)"
    assert board.loc["b", "run"] == "20261202-b"
    assert board.loc["a", "mean"] == pytest.approx(0.35)  # the run column is no number
    rows = json.loads(render(board, "json", index=True))
    assert rows[0] == {"model": "b", "t1": 0.9, "t2": 0.7, "mean": 0.8, "run": "20261202-b"}


SMALL = frame(row("r", "m|x", "t", 0.123456), row("r", "n", "t", 1 / 3, created=None))


def test_json_is_indented_records_and_the_index_is_a_column_when_asked() -> None:
    text = render(SMALL[["model", "value"]].assign(value=[0.125, 0.25]), "json")
    assert text == json.dumps([{"model": "m|x", "value": 0.125},
                               {"model": "n", "value": 0.25}], indent=2) + "\n"
    indexed = render(SMALL[["model", "value"]].set_index("model"), "json", index=True)
    assert json.loads(indexed)[0] == {"model": "m|x", "value": 0.123456}


def test_markdown_escapes_pipes_shortens_floats_and_leaves_none_empty() -> None:
    text = render(SMALL[["model", "value", "stderr"]], "markdown")
    assert text == ("| model | value | stderr |\n|---|---|---|\n"
                    "| m\\|x | 0.1235 |  |\n| n | 0.3333 |  |\n")
    indexed = render(SMALL[["model", "value"]].set_index("model"), "markdown", index=True)
    assert indexed.splitlines()[0] == "| model | value |"


def test_the_terminal_table_hides_paths_and_bookkeeping() -> None:
    text = render(SMALL, "table")
    header = text.splitlines()[0].split()
    assert header[:3] == ["invocation_id", "model", "task"]
    for hidden in ("run_dir", "task_dir", "created_at", "primary"):
        assert hidden not in header
    assert "0.1235" in text and "0.123456" not in text
    assert not text.startswith(" ") and not text.splitlines()[1].startswith("0")  # no index
    assert render(frame(), "table") == "(no finished tasks)\n"


def test_an_unknown_format_names_the_choices() -> None:
    with pytest.raises(ValueError, match=r"^unknown format 'xml'; choose one of table, csv, "
                                         r"json, markdown, parquet$"):
        render(SMALL, "xml")
