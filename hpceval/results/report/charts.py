"""Inline SVG charts (no matplotlib, no JavaScript, no network): one bar per model.

Every text that came from a run (model and task names) is HTML-escaped.
"""

from __future__ import annotations

import html

from hpceval.results.report.compare import Score

_BAR_H, _GAP, _LABEL_W, _PLOT_W, _VALUE_W = 22, 6, 220, 420, 280
_COLOURS = ("#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377", "#bbbbbb")


def task_chart(task: str, scores: list[Score], metric: str) -> str:
    """Horizontal bars, one per model: the value, with its 95% interval as a whisker (and the
    interval's method in the label)."""
    highs = [s.interval.high if s.interval else s.value for s in scores]
    top = max([1.0, *highs]) if all(0.0 <= s.value <= 1.0 for s in scores) else max(highs)
    top = top if top > 0 else 1.0
    height = len(scores) * (_BAR_H + _GAP) + 30
    width = _LABEL_W + _PLOT_W + _VALUE_W
    title = html.escape(f"{task}: {metric}")
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'role="img" class="chart" aria-label="{title}"><title>{title}</title>']
    for i, s in enumerate(scores):
        y = 10 + i * (_BAR_H + _GAP)
        w = max(0.0, s.value) / top * _PLOT_W
        colour = _COLOURS[i % len(_COLOURS)]
        name = html.escape(s.model)
        parts.append(f'<text x="{_LABEL_W - 8}" y="{y + 16}" text-anchor="end" '
                     f'font-size="13">{name}</text>')
        parts.append(f'<rect x="{_LABEL_W}" y="{y}" width="{w:.1f}" height="{_BAR_H}" '
                     f'fill="{colour}"><title>{name}: {s.value:.4g}</title></rect>')
        label = f"{s.value:.4g}"
        if s.interval:
            lo_v, hi_v = s.interval.low, s.interval.high
            lo = max(0.0, lo_v) / top * _PLOT_W + _LABEL_W
            hi = min(top, hi_v) / top * _PLOT_W + _LABEL_W
            mid = y + _BAR_H / 2
            parts.append(f'<line class="ci" x1="{lo:.1f}" y1="{mid}" x2="{hi:.1f}" y2="{mid}" '
                         'stroke="#222" stroke-width="1.5"/>')
            label += f" (95% CI {lo_v:.3g}–{hi_v:.3g}, {s.interval.method})"
        parts.append(f'<text x="{_LABEL_W + _PLOT_W + 6}" y="{y + 16}" '
                     f'font-size="12">{html.escape(label)}</text>')
    axis_y = height - 14
    parts.append(f'<line x1="{_LABEL_W}" y1="{axis_y}" x2="{_LABEL_W + _PLOT_W}" '
                 f'y2="{axis_y}" stroke="#888"/>')
    for frac in (0.0, 0.5, 1.0):
        x = _LABEL_W + frac * _PLOT_W
        parts.append(f'<text x="{x:.1f}" y="{height - 2}" font-size="11" text-anchor="middle" '
                     f'fill="#666">{top * frac:.3g}</text>')
    parts.append("</svg>")
    return "\n".join(parts)
