"""benchmarks/run_all.py's report assembly and aggregate_bench's generator; no Slurm, fast.

run_all runs two stand-in scripts in real subprocesses: one writes the benchmark JSON, one
fails. The report, the plot and the published page must show the first one's table and the
second one's failure with its stderr.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import aggregate_bench
import pytest
import run_all
from report_md import load_result

GOOD = """
import json, sys
path = sys.argv[sys.argv.index("--json") + 1]
quick = "--quick" in sys.argv
print("| what | ms |\\n|---|---:|\\n| thing | 12 |")
json.dump({"name": "good", "title": "Good section", "command": "python good.py",
           "rows": [{"metric": "sacct calls per refresh", "unit": "", "hpceval": 1,
                     "baseline": 1000, "baseline_label": "one sacct per job",
                     "ratio": 0.001, "better": "lower", "target": "1 per refresh",
                     "ok": True},
                    {"metric": "status wall time", "unit": "ms", "hpceval": 750.5,
                     "baseline": 250.0, "baseline_label": "bare sacct", "ratio": 3.002,
                     "better": "lower", "target": None, "ok": None}],
           "notes": [f"quick={quick}"],
           "series": {"status ms": {"x": [10, 100, 1000], "y": [400, 450, 750]}}},
          open(path, "w"))
# the option's literal, which run_all looks for: "--quick"
"""
BAD = """
import sys
print("partial table on stdout")
print("Traceback: boom: sacct exploded", file=sys.stderr)
sys.exit(3)
"""
SILENT = "print('ran, but wrote no JSON')\n"
SLOW = "import time\ntime.sleep(60)\n"


@pytest.fixture
def scripts(tmp_path: Path) -> Path:
    folder = tmp_path / "scripts"
    folder.mkdir()
    (folder / "good.py").write_text(GOOD)
    (folder / "bad.py").write_text(BAD)
    (folder / "silent.py").write_text(SILENT)
    (folder / "slow.py").write_text(SLOW)
    return folder


def test_report_shows_table_plot_and_failure(scripts: Path, tmp_path: Path) -> None:
    out, docs = tmp_path / "out", tmp_path / "docs" / "benchmarks.md"
    rc = run_all.main(["--quick", "--publish", "--out", str(out), "--docs", str(docs)],
                      scripts={"good": "good.py", "bad": "bad.py"}, folder=scripts)
    assert rc == 1  # one failed: the driver says so, after running the other
    md = (out / "report.md").read_text()
    assert "**1 of 2 failed: bad**" in md
    assert "| measured | hpceval | baseline | ratio | better | target | |" in md
    assert ("| sacct calls per refresh | 1 | 1,000 (one sacct per job) | 0.001x | lower | "
            "1 per refresh | met |") in md
    assert "| status wall time | 750.5 ms | 250 ms (bare sacct) | 3x | lower |" in md
    assert "- quick=True" in md  # --quick reached the script that has it
    assert "**FAILED** (exit 3" in md and "boom: sacct exploded" in md
    assert "| Good section (`good`) | ok | 2 | 1/1 |" in md
    assert (out / "good.md").read_text().startswith("| what | ms |")

    svg = (out / "report.svg").read_text()
    root = ET.fromstring(svg)  # well-formed XML
    texts = ["".join(t.itertext()) for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert "bad: FAILED" in texts and "0.001x" in texts and "3x" in texts
    assert any(p.get("points") for p in root.iter("{http://www.w3.org/2000/svg}polyline"))

    page = docs.read_text()
    assert "## Machine" in page and "| Python |" in page and "| memory |" in page
    assert ".venv/bin/python benchmarks/run_all.py --quick --publish" in page
    assert "boom: sacct exploded" in page and docs.with_suffix(".svg").is_file()


def test_only_and_missing_json(scripts: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    # a stale file from an earlier run must not pass for this run's figures
    (out / "silent.json").write_text(json.dumps({"name": "silent", "title": "t",
                                                 "command": "c", "rows": [{"metric": "m",
                                                                           "hpceval": 1}]}))
    rc = run_all.main(["--only", "silent", "--out", str(out)],
                      scripts={"good": "good.py", "silent": "silent.py"}, folder=scripts)
    assert rc == 1
    md = (out / "report.md").read_text()
    assert "no JSON written" in md and "Good section" not in md
    assert not (out / "good.json").exists()


def test_timeout_is_a_failure(scripts: Path, tmp_path: Path) -> None:
    rc = run_all.main(["--out", str(tmp_path / "out"), "--timeout", "1"],
                      scripts={"slow": "slow.py"}, folder=scripts)
    assert rc == 1
    assert "**FAILED** (timed out after 1 s, after " in (
        tmp_path / "out" / "report.md").read_text()


def test_load_result_names_the_bad_row(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"name": "x", "title": "x", "command": "c",
                                "rows": [{"metric": "m"}]}))
    with pytest.raises(ValueError, match=r"rows\[0\] needs at least 'metric' and 'hpceval'"):
        load_result(path)


def test_aggregate_generator_small(tmp_path: Path) -> None:
    from hpceval.results.table import leaderboard, results_frame
    from hpceval.runs.registry import read_registry

    out = tmp_path / "out"
    runs = aggregate_bench.generate_tree(out, 45, metrics=2, models_per_run=2,
                                         tasks_per_model=5)
    assert len(runs) == 5 and len(read_registry(out)) == 5  # 4 full runs of 10, then 5
    assert sorted(p.parents[2].name for p in out.glob("*/models/*/tasks/*/done")) == (
        sorted([f"model-{m:03d}" for m in range(2)] * 20 + ["model-000"] * 5))
    frame = results_frame(runs)
    assert len(frame) == 90 and len(aggregate_bench.naive_rows(out)) == 90
    assert frame["primary"].sum() == 45  # extra.primary_metric picks one per task
    assert leaderboard(frame).shape == (2, 7)  # 2 models x (5 tasks + mean + run)
    target = tmp_path / "naive.csv"  # the baseline's own-process program runs as written
    subprocess.run([sys.executable, "-c", aggregate_bench.naive_csv_program(), str(out),
                    str(target)], check=True)
    with target.open(newline="") as handle:
        assert sum(1 for _ in csv.reader(handle)) == 91


@pytest.mark.parametrize("name", sorted(run_all.SCRIPTS))
def test_every_benchmark_starts(name: str) -> None:
    """Each script run_all runs imports what it needs when started as run_all starts it (a
    fresh interpreter, this checkout's benchmarks/ as its folder): resume_waste.py once could
    not, as it imports a drill whose modules import the test support as pytest puts it on the
    path, and no report showed it until run_all reached it."""
    script = Path(run_all.HERE) / run_all.SCRIPTS[name]
    done = subprocess.run([sys.executable, str(script), "--help"], capture_output=True,
                          text=True, timeout=60, check=False, cwd=run_all.ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
