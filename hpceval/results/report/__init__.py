"""A static HTML report: one self-contained file, no server, no network, no CDN.

It answers what is asked of an evaluation: what exactly was run (config, model, layout,
harness versions, image digests, job ids, wall times), how the models compare and whether the
difference is real (intervals by the method each row names, paired tests on per-sample
files), what it cost in GPU-hours and where that time went (each job's phases: the model's
ledger, report.ledger), what the server did for each task (requests, latency,
tokens/s: the proxy's runtime.json, report.served), and which questions a model got wrong
(per-sample answers from the harness's own sample files, with a wrong-answers filter). The
page is built from the results table (hpceval.results.table), the run directories, a bounded
read of each task's sample files for the answers shown (report.samples) and one full read of
their scores for intervals and tests, never by inlining every sample: its size grows with
tasks, not with samples. Its only script is the filter (inline); opening
``report.html#wrong`` starts with the filter on.
"""

from __future__ import annotations

import html
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpceval import contract
from hpceval.results.report.charts import task_chart
from hpceval.results.report.checkpoints import steps_section
from hpceval.results.report.compare import comparisons
from hpceval.results.report.ledger import ledger_section
from hpceval.results.report.runinfo import RunInfo, read_run_info
from hpceval.results.report.samples import SampleCollector, TaskSamples, read_task_samples
from hpceval.results.report.sections import (
    comparison_section,
    cost_section,
    runs_section,
    samples_section,
)
from hpceval.results.report.served import served_section
from hpceval.results.table import leaderboard
from hpceval.storage import atomic_write_text

__all__ = ["DEFAULT_SAMPLES", "build_step_report", "html_report", "step_report_html",
           "task_chart", "write_report", "write_step_report"]

DEFAULT_SAMPLES = 20

_CSS = """body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:90em}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;
text-align:right;vertical-align:top}th:first-child,td:first-child{text-align:left}
h2{margin-top:2em;border-bottom:1px solid #ddd}.meta{color:#666;font-size:90%}
table.models td,table.tasks td,table.samples td,table.models th,table.tasks th,
table.samples th{text-align:left}
pre{white-space:pre-wrap;margin:0;max-width:40em;max-height:14em;overflow:auto;font-size:85%}
tr.wrong td:last-child{color:#b00020}tr.right td:last-child{color:#1b7f2a}
li.apart{color:#1b5e20}span.partial{color:#b26a00}span.flag{color:#b00020}
li.overlap{color:#795548}nav a{margin-right:1em}
td{overflow-wrap:break-word;word-break:break-word}"""

# The wrong-answer filter. Rows are hidden with the `hidden` attribute (not CSS), so the
# state is in the DOM: a headless browser's --dump-dom shows what a reader would see.
_SCRIPT = """(function(){
var box=document.getElementById('wrong-only');if(!box){return;}
function apply(){var on=box.checked,n=0;
document.querySelectorAll('tr.sample').forEach(function(r){
var hide=on&&!r.classList.contains('wrong');r.hidden=hide;if(!hide){n++;}});
document.body.setAttribute('data-filter',on?'wrong':'all');
document.getElementById('shown-count').textContent=n+' shown';}
box.addEventListener('change',apply);if(location.hash==='#wrong'){box.checked=true;}apply();
})();"""


def _run_dirs(frame: Any, run_dirs: list[Path] | None) -> list[Path]:
    if run_dirs is not None:
        return run_dirs
    if frame.empty or "run_dir" not in frame.columns:
        return []
    return [Path(d) for d in sorted(frame["run_dir"].dropna().unique())]


def _read_samples(frame: Any, first: int, scan_limit: int) -> dict[str, TaskSamples]:
    """One pass over each task's sample files: every item's score for the comparison (kept in
    results.compare's cache) and the rows the page shows (returned per task directory)."""
    from hpceval.results.compare import remember, row_filter
    from hpceval.results.paired import read_item_scores
    from hpceval.results.sample_files import sample_files

    out: dict[str, TaskSamples] = {}
    if frame.empty or "task_dir" not in frame.columns:
        return out
    primary = frame[frame["primary"]]
    for task_dir, metric, filt in zip(primary["task_dir"].astype(str).tolist(),
                                      primary["metric"].astype(str).tolist(),
                                      primary["filter"].tolist(), strict=True):
        filt = row_filter({"filter": filt})
        if task_dir in out:
            continue
        files = sample_files(task_dir)
        if not files:  # looked once: the samples section does not look again
            out[task_dir] = TaskSamples()
            continue
        collector = SampleCollector(files, first, scan_limit)
        remember(task_dir, metric, filt, read_item_scores(task_dir, metric, filt,
                                                          collector.feed))
        out[task_dir] = collector.out
    return out


def _samples(infos: list[RunInfo], first: int, scan_limit: int, wanted: set[tuple[str, str]],
             read: dict[str, TaskSamples]) -> list[tuple[str, str, TaskSamples]]:
    out = []
    for info in infos:
        for m in info.models:
            for t in m.tasks:
                if not t.done or (m.key, t.task) not in wanted:
                    continue
                task_dir = contract.task_dir(info.run_dir, m.key, t.key)  # as run_rows
                found = read.get(task_dir)
                if found is None:
                    found = read_task_samples(task_dir, first, scan_limit=scan_limit)
                if found.files:
                    out.append((m.key, t.task, found))
    return out


def html_report(frame: Any, title: str = "hpceval results", *, run_dirs: list[Path] | None = None,
                cost: Any = None, samples: int = DEFAULT_SAMPLES,
                scan_limit: int = 10_000) -> str:
    """The page for these results (a results_frame); `cost` is a runs.cost.cost_frame."""
    from hpceval.results.compare import fresh_reads

    fresh_reads()
    read = _read_samples(frame, samples, scan_limit)
    runs = sorted(frame["invocation_id"].unique()) if not frame.empty else []
    infos = [i for d in _run_dirs(frame, run_dirs) if (i := read_run_info(d)) is not None]
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
           f"<h1>{html.escape(title)}</h1>",
           f'<p class="meta">{len(runs)} run(s): {html.escape(", ".join(runs))}. '
           f"Generated {html.escape(time.strftime('%Y-%m-%d %H:%M'))} by hpceval.</p>",
           '<nav><a href="#leaderboard">leaderboard</a><a href="#comparison">comparison</a>'
           '<a href="#cost">cost</a><a href="#ledger">where the GPU time went</a>'
           '<a href="#served">what the server did</a>'
           '<a href="#runs">what was run</a><a href="#samples">per-sample answers</a></nav>']
    if frame.empty:
        out.append("<p>No finished tasks yet.</p>")
    else:
        out.append('<section id="leaderboard"><h2>Leaderboard (primary metric per task)</h2>')
        out.append(leaderboard(frame).to_html(float_format=lambda v: f"{v:.4g}", na_rep="",
                                              escape=True, classes="leaderboard", border=0))
        out.append("</section>")
        out.append(comparison_section(comparisons(frame)))
    out.append(cost_section(cost))
    # Only the (model, task) pairs of the table: --model / --task narrow these too.
    wanted = set() if frame.empty else set(zip(frame["model"], frame["task"], strict=True))
    out.append(ledger_section(infos, wanted))
    out.append(served_section(infos, wanted))
    out.append(runs_section(infos))
    out.append(samples_section(_samples(infos, samples, scan_limit, wanted, read), samples))
    out.append(f"<script>{_SCRIPT}</script></body></html>")
    return "\n".join(out) + "\n"


def write_report(frame: Any, path: Path, title: str = "hpceval results", **kw: Any) -> None:
    atomic_write_text(path, html_report(frame, title, **kw))


def step_report_html(table: Any, title: str = "hpceval: score vs training step", *,
                     metric: str | None = None, cost: Any = None) -> str:
    """The page for a step_table (one run per checkpoint): the charts and table of scores
    against the step, then what was run at each step (and its cost when given)."""
    runs = [] if table.empty else list(dict.fromkeys(table["invocation_id"]))
    steps = [] if table.empty else sorted(set(table["step"]))
    dirs = [] if table.empty else list(dict.fromkeys(table["run_dir"]))
    infos = [i for d in dirs if (i := read_run_info(Path(d))) is not None]
    span = f"steps {steps[0]:,} to {steps[-1]:,}" if steps else "no finished step yet"
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
           f"<h1>{html.escape(title)}</h1>",
           f'<p class="meta">{len(steps)} step(s) with results ({html.escape(span)}), '
           f"{len(runs)} run(s). Generated {html.escape(time.strftime('%Y-%m-%d %H:%M'))} "
           "by hpceval.</p>",
           '<nav><a href="#steps">score vs step</a>'
           + ('<a href="#cost">cost</a>' if cost is not None else "")
           + '<a href="#runs">what was run</a></nav>', steps_section(table, metric)]
    if cost is not None:
        out.append(cost_section(cost))
    out.append(runs_section(infos))
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def write_step_report(table: Any, path: Path, title: str = "hpceval: score vs training step",
                      **kw: Any) -> None:
    atomic_write_text(Path(path), step_report_html(table, title, **kw))


def build_step_report(points: Sequence[tuple[int, Path]], out_path: Path,
                      title: str = "hpceval: score vs training step", *,
                      metric: str | None = None, cost: Any = None) -> Any:
    """Write the score-vs-step page for (step, run_dir) pairs; returns the step_table."""
    from hpceval.results.checkpoints import step_table

    table = step_table(points)
    write_step_report(table, out_path, title, metric=metric, cost=cost)
    return table
