"""hpceval.durations: the config's time limits, read and written back."""

from __future__ import annotations

import pytest

from hpceval.durations import format_walltime, walltime_minutes, walltime_seconds


@pytest.mark.parametrize("text, seconds", [
    ("30", 1800), ("01:30", 90), ("04:00:00", 14400), ("1-02", 93600), ("1-02:03", 93780),
    ("1-00:00:10", 86410), (" 12:00:30 ", 43230)])
def test_every_form_reads(text: str, seconds: int) -> None:
    assert walltime_seconds(text) == seconds


@pytest.mark.parametrize("seconds", [0, 59, 60, 3599, 3600, 86399, 86400, 93784, 10 * 86400 + 1])
def test_round_trip(seconds: int) -> None:
    text = format_walltime(seconds)
    assert walltime_seconds(text) == seconds
    assert format_walltime(walltime_seconds(text)) == text


def test_written_forms() -> None:
    assert format_walltime(90) == "00:01:30"
    assert format_walltime(93784) == "1-02:03:04"


@pytest.mark.parametrize("text", ["", "1:2:3:4", "x", "1-", "-5", "1:123"])
def test_not_a_time_limit(text: str) -> None:
    with pytest.raises(ValueError):
        walltime_seconds(text)
    assert walltime_minutes(text) is None


def test_minutes_round_up() -> None:
    assert walltime_minutes("0:30") == 1 and walltime_minutes("12:00:30") == 721
    with pytest.raises(ValueError):
        format_walltime(-1)
