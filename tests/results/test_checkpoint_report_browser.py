"""The score-vs-step report in headless Chromium (see test_report_browser): the rendered DOM
has one chart per task, its points in step order, each at its run's score."""

from __future__ import annotations

import itertools
from html.parser import HTMLParser
from pathlib import Path

import pytest
from support.checkpoints import PARTIAL, SCORES, step_runs
from support.reports import ONE, TWO
from support.slurm import RecordedSlurm
from test_report_browser import dump_dom

from hpceval.cli.checkpoint_output import echo_step_results


class Charts(HTMLParser):
    """Per <svg class="step-chart">: its attributes and its points' attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.charts: list[tuple[dict[str, str | None], list[dict[str, str | None]]]] = []
        self.partial: list[str] = []
        self._in_partial = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "svg" and found.get("class") == "step-chart":
            self.charts.append((found, []))
        if tag == "circle" and found.get("class") == "point":
            self.charts[-1][1].append(found)
        self._in_partial = tag == "span" and found.get("class") == "partial"

    def handle_data(self, data: str) -> None:
        if self._in_partial:
            self.partial.append(data)
            self._in_partial = False


def test_rendered_step_report_has_a_chart_per_task(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    fake = RecordedSlurm()
    fake._ids = itertools.count(16)
    monkeypatch.setattr("hpceval.backends.slurm.client.CommandSlurmClient", lambda **_: fake)
    page = tmp_path / "steps.html"
    echo_step_results(step_runs(tmp_path), html_file=str(page))
    dom = Charts()
    dom.feed(dump_dom(page.as_uri(), tmp_path / "profile"))
    assert [c[0]["data-task"] for c in dom.charts] == [ONE, TWO]
    for (svg, circles), task in zip(dom.charts, (ONE, TWO), strict=True):
        want = sorted((step, scores[task][0]) for step, scores in SCORES.items()
                      if task in scores)
        assert [(int(c["data-step"] or 0), float(c["data-value"] or 0)) for c in circles] == want
        lo, hi = float(svg["data-ymin"] or 0), float(svg["data-ymax"] or 0)
        top, height = float(svg["data-top"] or 0), float(svg["data-plot-height"] or 0)
        for c in circles:
            y = top + (hi - float(c["data-value"] or 0)) / (hi - lo) * height
            assert float(c["cy"] or 0) == pytest.approx(y, abs=0.01)
    assert len(dom.charts[0][1]) == 4 and len(dom.charts[1][1]) == 3
    assert dom.partial == ["1/2 partial"] and PARTIAL == 4000
