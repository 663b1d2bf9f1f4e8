"""The report in a real browser: headless Chromium (Debian's `chromium`) renders it, scripts
run, and the DOM it dumps is what a reader sees: tables, charts, and the wrong-answer filter.

Skipped when chromium is not installed, unless HPCEVAL_REQUIRE_BROWSER=1 (scripts/run-tests.sh,
CI), where a missing browser fails instead of turning these tests into silent skips.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.reports import SCORES, finish
from support.runs import configs
from support.slurm import RecordedSlurm

from hpceval.cli.main import cli
from hpceval.runs.submit import submit_configs

BROWSER_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--no-first-run", "--no-default-browser-check", "--disable-extensions"]


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        message = "chromium not installed (apt-get install chromium; scripts/lib/env.sh does)"
        if os.environ.get("HPCEVAL_REQUIRE_BROWSER") == "1":
            pytest.fail(f"HPCEVAL_REQUIRE_BROWSER=1 but {message}")
        pytest.skip(message)
    return found


def dump_dom(url: str, profile: Path) -> str:
    result = subprocess.run([chromium(), *BROWSER_FLAGS, f"--user-data-dir={profile}",
                             "--dump-dom", url], capture_output=True, text=True, timeout=120,
                            check=False, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


class Rows(HTMLParser):
    """Sample rows of the rendered DOM: (classes, hidden) per <tr class="sample ...">."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[str, bool]] = []
        self.tags: dict[str, int] = {}
        self.body: dict[str, str | None] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] = self.tags.get(tag, 0) + 1
        found = dict(attrs)
        if tag == "body":
            self.body = found
        if tag == "tr" and (found.get("class") or "").startswith("sample"):
            self.rows.append((found["class"] or "", "hidden" in found))


@pytest.fixture
def report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    fake = RecordedSlurm()
    fake._ids = itertools.count(16)
    monkeypatch.setattr("hpceval.backends.slurm.client.CommandSlurmClient", lambda **_: fake)
    run = submit_configs(configs(tmp_path, 2), fake, aggregate=False)
    for (model, task), (value, stderr) in SCORES.items():
        finish(run.run_dir, model, task, value, stderr, samples=30,
               job={"job_id": "99", "array_job_id": "16", "array_task_id": model[-1]})
    page = tmp_path / "report.html"
    out = CliRunner().invoke(cli, ["results", run.invocation_id, "--html", str(page),
                                   "--samples", "6"])
    assert out.exit_code == 0, out.output
    return page


def test_rendered_report_has_tables_and_charts(report: Path, tmp_path: Path) -> None:
    dom = Rows()
    dom.feed(dump_dom(report.as_uri(), tmp_path / "profile"))
    assert dom.tags.get("svg", 0) == 2 and dom.tags.get("table", 0) >= 6
    assert dom.body.get("data-filter") == "all"  # the script ran
    # 4 tasks x (the first 6, plus wrong ones up to 6: 0 and 3 are in the head, 6..15 not)
    assert len(dom.rows) == 4 * 10 and not any(hidden for _, hidden in dom.rows)


def test_wrong_answer_filter_hides_right_answers(report: Path, tmp_path: Path) -> None:
    dom = Rows()
    dom.feed(dump_dom(report.as_uri() + "#wrong", tmp_path / "profile"))
    assert dom.body.get("data-filter") == "wrong"
    visible = [cls for cls, hidden in dom.rows if not hidden]
    assert visible and all("wrong" in cls for cls in visible)
    assert len(visible) == 4 * 6
    assert sum(hidden for _, hidden in dom.rows) == 4 * 4  # the right answers of the head
