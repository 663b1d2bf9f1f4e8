"""The report's "Where the GPU time went": per run the sums over every job of every model (its
ledger: results.ledger), then per model of the results table a timeline, one stacked bar per
job (setup, load, tasks with the last task alone at its end, teardown), each phase's seconds
and GPU-seconds in its tooltip.

A model without a ledger (a run older than the marks) is left out; one whose ledger is not read
(not yours, a link, over 1 MiB) is a line that says why, and counts as unknown in its run's
sums. A damaged file shows the jobs its good lines make (results.ledger skips the others).
"""

from __future__ import annotations

from pathlib import Path

from hpceval import contract
from hpceval.durations import span
from hpceval.results.ledger import JobLedger, read_ledger, sum_ledgers
from hpceval.results.ledger_view import JOBS_LISTED, totals_line
from hpceval.results.report.charts import stacked_chart
from hpceval.results.report.runinfo import RunInfo
from hpceval.results.report.sections import escape

# Paul Tol's colours as the other charts; the last task alone a lighter shade of tasks
KEY = (("setup", "#bbbbbb"), ("load", "#ee7733"), ("tasks", "#4477aa"),
       ("last task alone", "#88ccee"), ("teardown", "#aa3377"))

Read = tuple[list[JobLedger], str | None]


def _tip(name: str, seconds: float, gpus: int | None, more: str = "") -> str:
    text = f"{name} {seconds:.0f} s"
    if gpus:
        text += f" ({seconds * gpus:,.0f} GPU-seconds)"
    return text + more


def job_bar(job: JobLedger) -> tuple[str, list[tuple[str, float, str]], str]:
    """One job as stacked_chart's bar: its phases in order, the tail cut from the tasks'."""
    s, gpus = job.seconds, job.gpus
    tail = min(job.tail_s or 0.0, s["tasks"])
    steps = ", ".join(f"{k} {v:.0f} s" for k, v in job.load_steps.items())
    parts = [("setup", s["setup"], _tip("setup", s["setup"], gpus)),
             ("load", s["load"], _tip("load", s["load"], gpus, f" ({steps})" if steps else "")),
             ("tasks", s["tasks"] - tail, _tip(
                 "tasks", s["tasks"], gpus, (f", the last {tail:.0f} s of it one task alone"
                                             if tail else "")
                 + (f", servers idle {job.idle_s:.0f} s of it" if job.idle_s is not None
                    else ""))),
             ("last task alone", tail, _tip("last task alone", tail, gpus)),
             ("teardown", s["teardown"], _tip("teardown", s["teardown"], gpus))]
    note = span(job.total_s) + (f" on {gpus} GPU(s)" if gpus else "")
    if not job.ended:
        note += " (no end mark)"  # still running, or killed: the section says
    return f"job {job.job_id}", parts, note


def _model(info: RunInfo, key: str, read: Read) -> str:
    jobs, why = read
    out = [f'<div class="ledger" data-model="{escape(key)}" '
           f'data-run="{escape(info.invocation_id)}">'
           f"<h3>{escape(key)} · {escape(info.invocation_id)}</h3>"]
    if why is not None:
        out.append(f'<p><span class="flag">ledger unknown: {escape(why)}</span></p></div>')
        return "".join(out)
    out.append(f'<p class="meta">{escape(totals_line(sum_ledgers([read])))}</p>')
    drawn = jobs[-JOBS_LISTED:]
    if len(drawn) < len(jobs):
        out.append(f'<p class="meta">The newest {len(drawn)} jobs; {len(jobs) - len(drawn)} '
                   "earlier ones are in the sums above, not drawn.</p>")
    out.append(stacked_chart(f"{key}: each job's allocation by phase",
                             [job_bar(j) for j in drawn], KEY))
    out.append("</div>")
    return "".join(out)


def ledger_section(infos: list[RunInfo], wanted: set[tuple[str, str]]) -> str:
    """`wanted`: the (model, task) pairs of the results table; a run's sums count every model
    of it, the timelines only the table's."""
    out = ['<section id="ledger"><h2>Where the GPU time went</h2>',
           '<p class="meta">From the marks each job writes as it passes its phases (the '
           "model's ledger): setup (site setup, ports, the model's lock, image checks), load "
           "(the servers start: weights, compile, graph capture, the health wait), tasks (the "
           "last task alone: the time after the end of the one before it, when one harness "
           "kept the servers), teardown. GPU-hours are each phase's time times the GPUs the "
           "job held. A job without an end mark is still running (counted until now) or was "
           "killed. A ledger that is not yours, a link or over 1 MiB is not read: its line "
           "says why.</p>"]
    everything: list[Read] = []
    shown = 0
    for info in infos:
        found = {m.key: read_ledger(Path(contract.model_dir(info.run_dir, m.key)))
                 for m in info.models}
        total = sum_ledgers(found.values())
        if not total["jobs"] and not total["unknown"]:
            continue
        everything += found.values()
        out.append(f'<p class="total" data-run="{escape(info.invocation_id)}"><b>'
                   f"{escape(info.invocation_id)}</b>: {escape(totals_line(total))}</p>")
        for m in info.models:
            jobs, why = found[m.key]
            if (jobs or why) and any((m.key, t.task) in wanted for t in m.tasks):
                out.append(_model(info, m.key, found[m.key]))
        shown += 1
    if shown > 1:
        out.append(f'<p class="total"><b>all {shown} runs</b>: '
                   f"{escape(totals_line(sum_ledgers(everything)))}</p>")
    if not shown:
        out.append("<p>No ledger for these runs (runs older than the job script's marks).</p>")
    out.append("</section>")
    return "".join(out)
