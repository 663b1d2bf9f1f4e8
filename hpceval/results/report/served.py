"""The report's "What the server did": per model, each task's runtime.json as a table row (the
columns `hpceval info` shows: results.runtime_text) and its tokens/s as a bar; then the model's
server load over the job (server-load.json: results.server_load) as two charts, queue depth
(waiting, running) and output tokens/s, under its peaks and means; and the same for each
judge served in the model's job (its proxy samples its servers into auxiliary/<judge>/).

Only the tasks of the results table are shown (--model / --task narrow this section as they
narrow the samples), and the load of their models. A file that cannot be shown (not yours, too
large, malformed) is a row or a line that says why; a task or model without one (no in-job
proxy, a server without /metrics, an older run) is left out.
"""

from __future__ import annotations

from hpceval import contract
from hpceval.results.report.charts import task_chart, time_chart
from hpceval.results.report.compare import Score
from hpceval.results.report.runinfo import ModelInfo, RunInfo
from hpceval.results.report.sections import escape
from hpceval.results.runtime_text import COLUMNS, cells, extra_headers, load_line, total_line
from hpceval.results.runtime_view import Runtime, load_runtime, totals
from hpceval.results.server_load import COLUMNS as LOAD_COLUMNS
from hpceval.results.server_load import ServerLoad, judges_served_in, load_server_load

JUDGES_CHARTED = 4  # judges served in one model's job whose load the report draws


def _model_table(info: RunInfo, model: ModelInfo, found: list[tuple[str, Runtime]],
                 load: ServerLoad, judges: list[tuple[str, ServerLoad]]) -> str:
    out = [f'<div class="served" data-model="{escape(model.key)}" '
           f'data-run="{escape(info.invocation_id)}"><h3>{escape(model.key)} · '
           f"{escape(info.invocation_id)}</h3>"]
    if found:
        out.append(_tasks_table(model, found))
    if not load.missing:
        out.append(_load_charts(model.key, load))
    for name, judge in judges:  # the judges served in its job, each sampled by its proxy
        out.append(f'<h4 class="judge-load">judge {escape(name)}</h4>'
                   + _load_charts(f"{model.key} judge {name}", judge))
    out.append("</div>")
    return "".join(out)


def _tasks_table(model: ModelInfo, found: list[tuple[str, Runtime]]) -> str:
    extras = extra_headers([r for _, r in found])
    head = ["task", *(c.header for c in COLUMNS), *extras]
    rows = []
    for task, runtime in found:
        if runtime.facts is None:
            rows.append(f'<tr class="unknown"><td>{escape(task)}</td><td colspan="{len(head) - 1}">'
                        f'<span class="flag">unknown: {escape(runtime.problem)}</span></td></tr>')
        else:
            rows.append(f"<tr><td>{escape(task)}</td>"
                        + "".join(f"<td>{escape(c)}</td>" for c in cells(runtime, extras))
                        + "</tr>")
    out = [f"<p class=\"meta\">{escape(total_line(totals(r for _, r in found)))}</p>",
           '<table class="served"><thead><tr>' + "".join(f"<th>{escape(h)}</th>" for h in head)
           + "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>"]
    # the score chart's bars, one per task here: Score's `model` is the bar's label
    bars = [Score(task, float(r.facts["tokens_per_s"]), None, None) for task, r in found
            if r.facts is not None and r.facts.get("tokens_per_s") is not None]
    if bars:
        out.append(task_chart(model.key, bars, "tokens/s (completion tokens of fresh answers "
                                               "per second)"))
    return "".join(out)


def _load_charts(label: str, load: ServerLoad) -> str:
    """The servers' load over the job: its peaks and means, then the two charts."""
    if load.facts is None:
        return (f'<p class="load"><span class="flag">server load unknown: '
                f"{escape(load.problem)}</span></p>")
    points = load.facts["points"]
    column = {name: [p[i] for p in points] for i, name in enumerate(LOAD_COLUMNS)}
    times = [float(t) for t in column["t"]]
    out = [f'<p class="meta load">Server load from /metrics: {escape(load_line(load))}.</p>']
    if points:
        out.append(time_chart(f"{label}: requests in the server", times,
                              [("waiting", column["waiting"]), ("running", column["running"])],
                              "highest per point"))
        out.append(time_chart(f"{label}: output tokens/s", times,
                              [("generated", column["gen_tps"])], "mean per point"))
    return "".join(out)


def served_section(infos: list[RunInfo], wanted: set[tuple[str, str]]) -> str:
    """`wanted`: the (model, task) pairs of the results table."""
    out = ['<section id="served"><h2>What the server did</h2>',
           '<p class="meta">What the in-job proxy counted for each task (its runtime.json): '
           "every answer (cached: from the response cache of a resumed job; errors: not 2xx), "
           "latency of the fresh answers, tokens from each answer's usage, completion tokens "
           "per second of the fresh answers, how the generations ended; and the model's "
           "server load sampled from its servers' /metrics while the job ran (its "
           "server-load.json): requests waiting and running (summed over instances) and "
           "output tokens/s over time. A file that is not yours, too large or malformed is "
           "not read: its row or line says why.</p>"]
    shown = 0
    for info in infos:
        for m in info.models:
            if not any((m.key, t.task) in wanted for t in m.tasks):
                continue
            found = [(t.task, load_runtime(contract.task_dir(info.run_dir, m.key, t.key)))
                     for t in m.tasks if t.done and (m.key, t.task) in wanted]
            found = [(task, r) for task, r in found if not r.missing]
            folder = contract.model_dir(info.run_dir, m.key)
            load = load_server_load(folder)
            judges = [(name, judge) for name, path in judges_served_in(folder, JUDGES_CHARTED)
                      if not (judge := load_server_load(path)).missing]
            if found or not load.missing or judges:
                out.append(_model_table(info, m, found, load, judges))
                shown += 1
    if not shown:
        out.append("<p>No runtime.json for these tasks, no server-load.json for their models "
                   "(no in-job proxy, or runs older than it).</p>")
    out.append("</section>")
    return "".join(out)
