"""The "Score vs training step" section: per task, an inline SVG line chart of its primary
metric against the step (95% interval whiskers where the harness gave a stderr), and the table.

Built from ``hpceval.results.checkpoints.step_table`` by pure functions: no files, no clock. The x
axis is linear in the step (checkpoints saved at uneven intervals keep their spacing). The y
axis spans the data and its intervals with a margin, not 0..1: progress between checkpoints is
often a few points, which a 0..1 axis would flatten. Each point carries data-step/data-value
(and the svg its y range) so a test, or a reader's tool, can check what is drawn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hpceval.results.report.charts import COLOURS
from hpceval.results.report.compare import Z95
from hpceval.results.report.sections import escape, html_table

_W, _H, _LEFT, _RIGHT, _TOP, _BOTTOM = 640, 260, 56, 24, 20, 40
_LABEL_ALL = 12  # more points than this: label the first, the last and the best only


@dataclass(frozen=True)
class StepPoint:
    step: int
    value: float
    stderr: float | None = None

    @property
    def interval(self) -> tuple[float, float] | None:
        if self.stderr is None:
            return None
        return self.value - Z95 * self.stderr, self.value + Z95 * self.stderr


def _number(v: Any) -> float | None:
    if v is None:
        return None
    f = float(v)
    return None if math.isnan(f) else f


def y_range(points: list[StepPoint]) -> tuple[float, float]:
    """The y axis: the values and their intervals plus 10%, inside 0..1 for 0..1 metrics."""
    lows = [p.interval[0] if p.interval else p.value for p in points]
    highs = [p.interval[1] if p.interval else p.value for p in points]
    lo, hi = min(lows), max(highs)
    pad = (hi - lo) * 0.1 or max(abs(hi) * 0.1, 0.01)
    lo, hi = lo - pad, hi + pad
    if all(0.0 <= p.value <= 1.0 for p in points):
        lo, hi = max(0.0, lo), min(1.0, hi)
    return lo, hi


def _label_indexes(points: list[StepPoint]) -> set[int]:
    if len(points) <= _LABEL_ALL:
        return set(range(len(points)))
    best = max(range(len(points)), key=lambda i: points[i].value)
    return {0, len(points) - 1, best}


def step_chart(task: str, metric: str, series: list[tuple[str, list[StepPoint]]],
               steps: list[int] | None = None) -> str:
    """One SVG: a line per series (model), points in step order, labelled with their value.
    `steps`: the page's steps, so that the charts of all tasks share one x axis."""
    every = [p for _, pts in series for p in pts]
    steps = sorted({p.step for p in every} | set(steps or ()))
    x0, x1 = steps[0], steps[-1]
    lo, hi = y_range(every)
    plot_w, plot_h = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM

    def x(step: int) -> float:
        return _LEFT + (plot_w / 2 if x1 == x0 else (step - x0) / (x1 - x0) * plot_w)

    def y(value: float) -> float:
        clipped = min(hi, max(lo, value))
        return _TOP + (hi - clipped) / (hi - lo) * plot_h

    title = escape(f"{task}: {metric} by training step")
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{_W}" height="{_H}" role="img" '
           f'class="step-chart" data-task="{escape(task)}" data-ymin="{lo!r}" data-ymax="{hi!r}" '
           f'data-top="{_TOP}" data-plot-height="{plot_h}" aria-label="{title}">'
           f"<title>{title}</title>"]
    base = _TOP + plot_h
    out.append(f'<line x1="{_LEFT}" y1="{base}" x2="{_LEFT + plot_w}" y2="{base}" '
               'stroke="#888"/>')
    out.append(f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{base}" stroke="#888"/>')
    for frac in (0.0, 0.5, 1.0):
        v = lo + (hi - lo) * frac
        out.append(f'<text x="{_LEFT - 6}" y="{y(v) + 4:.1f}" font-size="11" '
                   f'text-anchor="end" fill="#666">{v:.3g}</text>')
    for s in (steps if len(steps) <= 8 else [steps[0], steps[len(steps) // 2], steps[-1]]):
        out.append(f'<text x="{x(s):.1f}" y="{base + 16}" font-size="11" '
                   f'text-anchor="middle" fill="#666">{s:,}</text>')
    out.append(f'<text x="{_LEFT + plot_w / 2:.1f}" y="{_H - 4}" font-size="12" '
               'text-anchor="middle" fill="#444">training step</text>')
    for n, (name, pts) in enumerate(series):
        colour = COLOURS[n % len(COLOURS)]
        pts = sorted(pts, key=lambda p: p.step)
        out.append(f'<g class="series" data-model="{escape(name)}">')
        if len(pts) > 1:
            line = " ".join(f"{x(p.step):.1f},{y(p.value):.1f}" for p in pts)
            out.append(f'<polyline points="{line}" fill="none" stroke="{colour}" '
                       'stroke-width="2"/>')
        labelled = _label_indexes(pts)
        for i, p in enumerate(pts):
            cx, cy = x(p.step), y(p.value)
            if p.interval:
                out.append(f'<line class="ci" x1="{cx:.1f}" y1="{y(p.interval[0]):.1f}" '
                           f'x2="{cx:.1f}" y2="{y(p.interval[1]):.1f}" stroke="{colour}" '
                           'stroke-opacity="0.5" stroke-width="1.5"/>')
            tip = f"{name} · step {p.step:,}: {p.value:.4g}" + (
                f" ± {p.stderr:.2g}" if p.stderr is not None else "")
            out.append(f'<circle class="point" cx="{cx:.2f}" cy="{cy:.2f}" r="4" '
                       f'fill="{colour}" data-step="{p.step}" data-value="{p.value!r}">'
                       f"<title>{escape(tip)}</title></circle>")
            if i in labelled:
                out.append(f'<text class="point-label" x="{cx:.1f}" y="{cy - 8:.1f}" '
                           f'font-size="11" text-anchor="middle">{p.value:.3g}</text>')
        out.append("</g>")
    if len(series) > 1:
        for n, (name, _) in enumerate(series):
            out.append(f'<text x="{_W - _RIGHT}" y="{_TOP + 12 + 14 * n}" font-size="11" '
                       f'text-anchor="end" fill="{COLOURS[n % len(COLOURS)]}">'
                       f"{escape(name)}</text>")
    out.append("</svg>")
    return "".join(out)


def chart_series(points: Any) -> list[tuple[str, str, list[tuple[str, list[StepPoint]]]]]:
    """(task, metric label, [(model, its points)]) per task, from primary_points()."""
    out = []
    for task, group in points.groupby("task", sort=True):
        first = group.iloc[0]
        flt = first["filter"]
        metric = str(first["metric"]) + (f" ({flt})" if isinstance(flt, str) and flt else "")
        series = []
        for model, rows in group.groupby("series", sort=True):
            series.append((str(model), [StepPoint(int(r.step), float(r.value),
                                                  _number(r.stderr))
                                        for r in rows.sort_values("step").itertuples()]))
        out.append((str(task), metric, series))
    return out


def steps_section(table: Any, metric: str | None = None) -> str:
    """The section for a step_table: a chart per task, then one row per step."""
    from hpceval.results.checkpoints import is_partial, primary_points, step_pivot

    out = ['<section id="steps"><h2>Score vs training step</h2>',
           '<p class="meta">One evaluation run per checkpoint. Primary metric per task'
           + (f" ({escape(metric)})" if metric else "") + "; whiskers: 95% interval (value ± "
           "1.96 × the harness's stderr). Only finished tasks are drawn; a step whose run "
           "has tasks left is marked partial in the table.</p>"]
    points = primary_points(table, metric)
    if points.empty:
        out.append("<p>No finished tasks at any step yet.</p></section>")
        return "".join(out)
    steps = sorted(int(s) for s in set(points["step"]))
    for task, label, series in chart_series(points):
        out.append(f'<div class="step-task" data-task="{escape(task)}"><h3>{escape(task)}</h3>'
                   f'<p class="meta">{escape(label)}</p>{step_chart(task, label, series, steps)}'
                   "</div>")
    pivot = step_pivot(table, metric)
    columns = [c for c in pivot.columns if c not in ("tasks_done", "tasks_total")]
    rows = []
    for step, r in pivot.iterrows():
        done, total = int(r["tasks_done"]), int(r["tasks_total"])
        state = f"{done}/{total}" + (" partial" if is_partial(done, total) else "")
        rows.append([escape(f"{int(step):,}")]
                    + ["" if _number(r[c]) is None else f"{float(r[c]):.4g}" for c in columns]
                    + [f'<span class="{"partial" if is_partial(done, total) else "whole"}">'
                       f"{escape(state)}</span>"])
    out.append(html_table(["step", *map(str, columns), "tasks done"], rows, "steps"))
    out.append("</section>")
    return "".join(out)
