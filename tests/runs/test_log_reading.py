"""`hpceval logs` reads logs in bounded memory (shared-cluster-4 N7: a harness wrote 1 GiB and
`logs -n 10` took 2.8 GB of memory, reading the file whole)."""

from __future__ import annotations

import io
import tracemalloc
from pathlib import Path

from hpceval.runs.logs import last_lines, print_logs


class Counting(io.StringIO):
    """An output that keeps only the last write and counts the characters."""

    def __init__(self) -> None:
        super().__init__()
        self.chars = 0
        self.last = ""

    def write(self, text: str) -> int:
        self.chars += len(text)
        self.last = text
        return len(text)


def big_log(path: Path, lines: int = 400_000) -> Path:
    with path.open("w") as handle:
        for i in range(lines):
            handle.write(f"line {i:07d} " + "x" * 80 + "\n")
    return path  # ~37 MB


def test_tail_and_whole_log_stay_in_bounded_memory(tmp_path: Path) -> None:
    log = big_log(tmp_path / "harness.log")
    size = log.stat().st_size
    tracemalloc.start()
    try:
        tail = Counting()
        print_logs([("task", log)], out=tail, tail=10)
        _, tail_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        whole = Counting()
        print_logs([("task", log)], out=whole)
        _, whole_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert tail_peak < 1 << 20 and whole_peak < 1 << 20, (tail_peak, whole_peak, size)
    assert whole.chars > size - 1000  # every line printed
    assert whole.last.startswith("line 0399999 ")


def test_last_lines_are_exactly_the_files_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("".join(f"{i}\n" for i in range(100_000)) + "no newline at the end")
    assert last_lines(log, 3) == ["99998", "99999", "no newline at the end"]
    assert last_lines(log, 1, block=7) == ["no newline at the end"]
    assert last_lines(tmp_path / "a.log", 200_000)[:2] == ["0", "1"]
    (tmp_path / "empty.log").write_text("")
    assert last_lines(tmp_path / "empty.log", 5) == []
    # a line longer than the bound comes cut at its start, not read whole
    (tmp_path / "long.log").write_bytes(b"y" * 100 + b"\nz")
    assert last_lines(tmp_path / "long.log", 5, block=16, most=32) == ["y" * 30, "z"]
