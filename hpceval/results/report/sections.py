"""HTML for each section of the report. Every text from a run is escaped here (`_e`)."""

from __future__ import annotations

import html
import time
from typing import Any

from hpceval.results.report.charts import task_chart
from hpceval.results.report.compare import TaskComparison
from hpceval.results.report.runinfo import RunInfo
from hpceval.results.report.samples import TaskSamples


def escape(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    s = round(seconds)
    return f"{s // 3600}h{(s % 3600) // 60:02d}m{s % 60:02d}s" if s >= 3600 else (
        f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{seconds:.1f}s")


def _with_digest(image: str, digest: str) -> str:
    return image if not digest or digest in image else f"{image} ({digest})"


def html_table(head: list[str], rows: list[list[str]], cls: str = "") -> str:
    """rows hold HTML already escaped by the caller."""
    out = [f'<table class="{cls}"><thead><tr>' + "".join(f"<th>{escape(h)}</th>" for h in head)
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
            rows.append([escape(s.model), escape(s.run), f"{s.value:.4g}", escape(ci),
                         escape(s.n if s.n else ""),
                         f'<span class="flag">{escape(flags)}</span>' if flags else ""])
        out.append(f'<div class="task-compare" data-task="{escape(item.task)}">'
                   f"<h3>{escape(item.task)}</h3><p class=\"meta\">{escape(item.metric)}</p>")
        out.append(task_chart(item.task, item.scores, item.metric))
        out.append(html_table(["model", "run", "value", "95% CI (method)", "samples", "flags"],
                              rows, "compare"))
        verdicts = item.verdicts()
        if verdicts:
            out.append('<ul class="verdicts">' + "".join(
                f'<li class="{"apart" if v.apart else "overlap"}'
                f'{" paired" if v.paired else " marginal"}">{escape(v.text)}</li>'
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
        rows.append([escape(r.invocation_id), escape(r.model), escape(r.task),
                     f"{r.gpu_hours:.4g}", f"{r.node_hours:.4g}",
                     escape(_duration(r.duration_s)),
                     "" if whole or _missing(r.items) else escape(f"{int(r.items)}"),
                     "" if whole or _missing(r.gpu_s_per_item) else f"{r.gpu_s_per_item:.4g}",
                     escape(f"{int(r.jobs)} ({int(r.unknown_jobs)} not accounted)" if whole and
                             r.unknown_jobs else (int(r.jobs) if whole else ""))])
    models = cost[cost["task"] == "(all jobs)"]
    total = (f"{models['gpu_hours'].sum():.4g} GPU-hours, {models['node_hours'].sum():.4g} "
             "node-hours in all")
    return ('<section id="cost"><h2>Cost</h2><p class="meta">What the jobs held (Slurm: '
            "AllocTRES; local: the runner's record) × how long (Elapsed); a model's row sums "
            "every job of its chain, a "
            "task's row is its duration × its job's GPUs, and per item its GPU-seconds over "
            "the items it scored. " + escape(total) + "</p>"
            + html_table(["run", "model", "task", "GPU-h", "node-h", "time", "items",
                          "GPU-s per item", "jobs"], rows, "cost")
            + "</section>")


def runs_section(infos: list[RunInfo]) -> str:
    out = ['<section id="runs"><h2>What was run</h2>']
    for info in infos:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(info.created_at))
        out.append(f'<div class="run" data-run="{escape(info.invocation_id)}">'
                   f"<h3>{escape(info.invocation_id)}</h3><p class=\"meta\">{escape(info.kind)}"
                   f"{' sweep' if info.sweep else ''}, submitted {escape(when)} by "
                   f"{escape(info.user or '?')} with hpceval {escape(info.hpceval_version)}; "
                   f"{escape(info.run_dir)}</p>")
        out.append(f"<details><summary>resolved config (run.yaml)</summary><pre>"
                   f"{escape(info.config_text)}</pre></details>")
        rows = []
        for m in info.models:
            image = _with_digest(m.server_image, m.server_digest)
            rows.append([escape(m.key), escape(m.model_id), escape(m.checkpoint),
                         escape(m.deployment),
                         escape(m.layout), escape(image), escape(", ".join(m.jobs)),
                         escape(_duration(m.wall_s))])
        out.append(html_table(["model", "model id", "checkpoint", "deployment", "layout",
                               "server image", "jobs", "task time"], rows, "models"))
        task_rows = []
        for m in info.models:
            for t in m.tasks:
                image = _with_digest(t.image, t.digest)
                task_rows.append([escape(m.key), escape(t.task),
                                  escape("done" if t.done else "not done"),
                                  escape(t.harness), escape(t.harness_version), escape(image),
                                  escape(t.job_id), escape(_duration(t.duration_s))])
        out.append("<details open><summary>tasks</summary>" + html_table(
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
        out.append(f'<div class="task-samples" data-model="{escape(model)}" '
                   f'data-task="{escape(task)}">'
                   f"<h3>{escape(model)} · {escape(task)}</h3><p class=\"meta\">{escape(scope)}; "
                   f"{escape(', '.join(found.files))}</p>")
        rows = []
        for s in found.samples:
            state = "wrong" if s.wrong else ("right" if s.score is not None else "unscored")
            rows.append(f'<tr class="sample {state}" data-line="{s.line}">'
                        f"<td>{escape(s.doc_id)}</td><td><pre>{escape(s.prompt)}</pre></td>"
                        f"<td><pre>{escape(s.answer)}</pre></td><td><pre>{escape(s.reference)}</pre>"
                        f"</td><td>{escape(s.metric)}"
                        f"{escape(f' ({s.filter})' if s.filter else '')} "
                        f"{'' if s.score is None else f'{s.score:.3g}'}</td></tr>")
        out.append('<table class="samples"><thead><tr><th>doc</th><th>prompt</th>'
                   "<th>answer</th><th>reference</th><th>score</th></tr></thead><tbody>"
                   + "".join(rows) + "</tbody></table></div>")
    out.append("</section>")
    return "".join(out)
