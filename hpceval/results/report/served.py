"""The report's "What the server did": per model, each task's runtime.json as a table row (the
columns `hpceval info` shows: results.runtime_text) and its tokens/s as a bar.

Only the tasks of the results table are shown (--model / --task narrow this section as they
narrow the samples). A file that cannot be shown (not yours, too large, malformed) is a row
that says why; a task without one (no in-job proxy, an older run) is left out.
"""

from __future__ import annotations

import html
from typing import Any

from hpceval import contract
from hpceval.results.report.charts import task_chart
from hpceval.results.report.compare import Score
from hpceval.results.report.runinfo import ModelInfo, RunInfo
from hpceval.results.runtime_text import COLUMNS, cells, extra_headers, total_line
from hpceval.results.runtime_view import Runtime, load_runtime, totals


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _model_table(info: RunInfo, model: ModelInfo, found: list[tuple[str, Runtime]]) -> str:
    extras = extra_headers([r for _, r in found])
    head = ["task", *(c.header for c in COLUMNS), *extras]
    rows = []
    for task, runtime in found:
        if runtime.facts is None:
            rows.append(f'<tr class="unknown"><td>{_e(task)}</td><td colspan="{len(head) - 1}">'
                        f'<span class="flag">unknown: {_e(runtime.problem)}</span></td></tr>')
        else:
            rows.append(f"<tr><td>{_e(task)}</td>"
                        + "".join(f"<td>{_e(c)}</td>" for c in cells(runtime, extras))
                        + "</tr>")
    out = [f'<div class="served" data-model="{_e(model.key)}" '
           f'data-run="{_e(info.invocation_id)}"><h3>{_e(model.key)} · '
           f"{_e(info.invocation_id)}</h3><p class=\"meta\">"
           f"{_e(total_line(totals(r for _, r in found)))}</p>",
           '<table class="served"><thead><tr>' + "".join(f"<th>{_e(h)}</th>" for h in head)
           + "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>"]
    # the score chart's bars, one per task here: Score's `model` is the bar's label
    bars = [Score(task, float(r.facts["tokens_per_s"]), None, None) for task, r in found
            if r.facts is not None and r.facts.get("tokens_per_s") is not None]
    if bars:
        out.append(task_chart(model.key, bars, "tokens/s (completion tokens of fresh answers "
                                               "per second)"))
    out.append("</div>")
    return "".join(out)


def served_section(infos: list[RunInfo], wanted: set[tuple[str, str]]) -> str:
    """`wanted`: the (model, task) pairs of the results table."""
    out = ['<section id="served"><h2>What the server did</h2>',
           '<p class="meta">What the in-job proxy counted for each task (its runtime.json): '
           "every answer (cached: from the response cache of a resumed job; errors: not 2xx), "
           "latency of the fresh answers, tokens from each answer's usage, completion tokens "
           "per second of the fresh answers, how the generations ended. A file that is not "
           "yours, too large or malformed is not read: its row says why.</p>"]
    shown = 0
    for info in infos:
        for m in info.models:
            found = [(t.task, load_runtime(contract.task_dir(info.run_dir, m.key, t.key)))
                     for t in m.tasks if t.done and (m.key, t.task) in wanted]
            found = [(task, r) for task, r in found if not r.missing]
            if found:
                out.append(_model_table(info, m, found))
                shown += 1
    if not shown:
        out.append("<p>No runtime.json for these tasks (no in-job proxy, or runs older "
                   "than it).</p>")
    out.append("</section>")
    return "".join(out)
