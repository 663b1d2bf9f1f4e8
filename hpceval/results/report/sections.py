"""HTML for each section of the report. Every text from a run is escaped here (`_e`)."""

from __future__ import annotations

import html
import time
from typing import Any

from hpceval.results.report.charts import task_chart
from hpceval.results.report.compare import TaskComparison
from hpceval.results.report.runinfo import RunInfo
from hpceval.results.report.samples import TaskSamples


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    s = round(seconds)
    return f"{s // 3600}h{(s % 3600) // 60:02d}m{s % 60:02d}s" if s >= 3600 else (
        f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{seconds:.1f}s")


def _with_digest(image: str, digest: str) -> str:
    return image if not digest or digest in image else f"{image} ({digest})"


def _table(head: list[str], rows: list[list[str]], cls: str = "") -> str:
    """rows hold HTML already escaped by the caller."""
    out = [f'<table class="{cls}"><thead><tr>' + "".join(f"<th>{_e(h)}</th>" for h in head)
           + "</tr></thead><tbody>"]
    out += ["<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows]
    out.append("</tbody></table>")
    return "".join(out)


def comparison_section(items: list[TaskComparison]) -> str:
    out = ['<section id="comparison"><h2>Comparison</h2>',
           '<p class="meta">Primary metric per task, best first; per model the run that '
           "counts (the newest run that finished the task; its id is in the table). "
           "Intervals: Wilson for shares of items scored 1, clustered over subtasks where a "
           "task has several, bootstrap for other per-sample scores, the harness's stderr "
           "only without sample files; the method is named on each row. Neighbours are "
           "compared with a paired test on the items both scored (McNemar exact for 0/1 "
           "scores, permutation otherwise) where per-sample files exist; otherwise the line "
           "says it falls back to marginal numbers. p-values are Holm-adjusted across the "
           "page.</p>"]
    for item in items:
        rows = []
        for s in item.scores:
            ci = s.interval.text() if s.interval else "no interval (no stderr, no samples)"
            flags = "; ".join(f.text() for f in s.flags)
            rows.append([_e(s.model), _e(s.run), f"{s.value:.4g}", _e(ci),
                         _e(s.n if s.n else ""),
                         f'<span class="flag">{_e(flags)}</span>' if flags else ""])
        out.append(f'<div class="task-compare" data-task="{_e(item.task)}">'
                   f"<h3>{_e(item.task)}</h3><p class=\"meta\">{_e(item.metric)}</p>")
        out.append(task_chart(item.task, item.scores, item.metric))
        out.append(_table(["model", "run", "value", "95% CI (method)", "samples", "flags"],
                          rows, "compare"))
        verdicts = item.verdicts()
        if verdicts:
            out.append('<ul class="verdicts">' + "".join(
                f'<li class="{"apart" if v.apart else "overlap"}'
                f'{" paired" if v.paired else " marginal"}">{_e(v.text)}</li>'
                for v in verdicts) + "</ul>")
        out.append("</div>")
    out.append("</section>")
    return "".join(out)


def _missing(value: Any) -> bool:
    """None or NaN: a frame's empty cell."""
    return value is None or value != value


def cost_section(cost: Any) -> str:
    if cost is None or cost.empty:
        return ('<section id="cost"><h2>Cost</h2><p class="meta">No accounting for these '
                "runs (their scheduler did not answer).</p></section>")
    rows = []
    for r in cost.itertuples():
        whole = r.task == "(all jobs)"
        rows.append([_e(r.invocation_id), _e(r.model), _e(r.task),
                     f"{r.gpu_hours:.4g}", f"{r.node_hours:.4g}",
                     _e(_duration(r.duration_s)),
                     "" if whole or _missing(r.items) else _e(f"{int(r.items)}"),
                     "" if whole or _missing(r.gpu_s_per_item) else f"{r.gpu_s_per_item:.4g}",
                     _e(f"{int(r.jobs)} ({int(r.unknown_jobs)} not accounted)" if whole and
                        r.unknown_jobs else (int(r.jobs) if whole else ""))])
    models = cost[cost["task"] == "(all jobs)"]
    total = (f"{models['gpu_hours'].sum():.4g} GPU-hours, {models['node_hours'].sum():.4g} "
             "node-hours in all")
    return ('<section id="cost"><h2>Cost</h2><p class="meta">What the jobs held (Slurm: '
            "AllocTRES; local: the runner's record) × how long (Elapsed); a model's row sums "
            "every job of its chain, a "
            "task's row is its duration × its job's GPUs, and per item its GPU-seconds over "
            "the items it scored. " + _e(total) + "</p>"
            + _table(["run", "model", "task", "GPU-h", "node-h", "time", "items",
                      "GPU-s per item", "jobs"], rows, "cost")
            + "</section>")


def runs_section(infos: list[RunInfo]) -> str:
    out = ['<section id="runs"><h2>What was run</h2>']
    for info in infos:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(info.created_at))
        out.append(f'<div class="run" data-run="{_e(info.invocation_id)}">'
                   f"<h3>{_e(info.invocation_id)}</h3><p class=\"meta\">{_e(info.kind)}"
                   f"{' sweep' if info.sweep else ''}, submitted {_e(when)} by "
                   f"{_e(info.user or '?')} with hpceval {_e(info.hpceval_version)}; "
                   f"{_e(info.run_dir)}</p>")
        out.append(f"<details><summary>resolved config (run.yaml)</summary><pre>"
                   f"{_e(info.config_text)}</pre></details>")
        rows = []
        for m in info.models:
            image = _with_digest(m.server_image, m.server_digest)
            rows.append([_e(m.key), _e(m.model_id), _e(m.checkpoint), _e(m.deployment),
                         _e(m.layout), _e(image), _e(", ".join(m.jobs)),
                         _e(_duration(m.wall_s))])
        out.append(_table(["model", "model id", "checkpoint", "deployment", "layout",
                           "server image", "jobs", "task time"], rows, "models"))
        task_rows = []
        for m in info.models:
            for t in m.tasks:
                image = _with_digest(t.image, t.digest)
                task_rows.append([_e(m.key), _e(t.task), _e("done" if t.done else "not done"),
                                  _e(t.harness), _e(t.harness_version), _e(image),
                                  _e(t.job_id), _e(_duration(t.duration_s))])
        out.append("<details open><summary>tasks</summary>" + _table(
            ["model", "task", "state", "harness", "version", "harness image", "job",
             "wall time"], task_rows, "tasks") + "</details></div>")
    out.append("</section>")
    return "".join(out)


def samples_section(per_task: list[tuple[str, str, TaskSamples]], first: int) -> str:
    """per_task: (model, task, its samples) for every finished task that has sample files."""
    out = ['<section id="samples"><h2>Per-sample answers</h2>',
           f'<p class="meta">From the harness\'s own sample files: the first {first} samples '
           f"of each task, and its first {first} wrong ones (score below 1). "
           '<label><input type="checkbox" id="wrong-only"> only wrong answers</label> '
           '<span id="shown-count"></span></p>']
    if not per_task:
        out.append("<p>No sample files (lm-eval writes them with --log_samples).</p>")
    for model, task, found in per_task:
        scope = (f"{found.scanned} sample(s) read, {found.wrong_scanned} wrong"
                 + ("" if found.complete else " (the file has more: see it for the rest)"))
        out.append(f'<div class="task-samples" data-model="{_e(model)}" data-task="{_e(task)}">'
                   f"<h3>{_e(model)} · {_e(task)}</h3><p class=\"meta\">{_e(scope)}; "
                   f"{_e(', '.join(found.files))}</p>")
        rows = []
        for s in found.samples:
            state = "wrong" if s.wrong else ("right" if s.score is not None else "unscored")
            rows.append(f'<tr class="sample {state}" data-line="{s.line}">'
                        f"<td>{_e(s.doc_id)}</td><td><pre>{_e(s.prompt)}</pre></td>"
                        f"<td><pre>{_e(s.answer)}</pre></td><td><pre>{_e(s.reference)}</pre>"
                        f"</td><td>{_e(s.metric)}{_e(f' ({s.filter})' if s.filter else '')} "
                        f"{'' if s.score is None else f'{s.score:.3g}'}</td></tr>")
        out.append('<table class="samples"><thead><tr><th>doc</th><th>prompt</th>'
                   "<th>answer</th><th>reference</th><th>score</th></tr></thead><tbody>"
                   + "".join(rows) + "</tbody></table></div>")
    out.append("</section>")
    return "".join(out)
