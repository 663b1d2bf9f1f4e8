"""A static HTML report: the leaderboard, then one bar chart per task comparing the models.

Charts are inline SVG written here (no matplotlib, no JavaScript, no network): the file can be
mailed, attached to a ticket or opened from shared storage on an air-gapped cluster. Every
text that came from a run (model and task names) is HTML-escaped.
"""

from __future__ import annotations

import html
import time
from pathlib import Path
from typing import Any

from hpceval.results.table import leaderboard
from hpceval.storage import atomic_write_text

_BAR_H, _GAP, _LABEL_W, _PLOT_W, _VALUE_W = 22, 6, 220, 420, 110
_COLOURS = ("#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377", "#bbbbbb")
_CSS = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;
text-align:right}th:first-child,td:first-child{text-align:left}h2{margin-top:2em}
.meta{color:#666;font-size:90%}"""


def task_chart(task: str, rows: list[tuple[str, float, float | None]], metric: str) -> str:
    """Horizontal bars, one per model: value, with a +-stderr whisker when known."""
    top = max([1.0] + [v + (e or 0.0) for _, v, e in rows]) if all(
        0.0 <= v <= 1.0 for _, v, _ in rows) else max(v + (e or 0.0) for _, v, e in rows)
    top = top if top > 0 else 1.0
    height = len(rows) * (_BAR_H + _GAP) + 30
    width = _LABEL_W + _PLOT_W + _VALUE_W
    title = html.escape(f"{task}: {metric}")
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'role="img" aria-label="{title}"><title>{title}</title>']
    for i, (model, value, err) in enumerate(rows):
        y = 10 + i * (_BAR_H + _GAP)
        w = max(0.0, value) / top * _PLOT_W
        colour = _COLOURS[i % len(_COLOURS)]
        name = html.escape(model)
        parts.append(f'<text x="{_LABEL_W - 8}" y="{y + 16}" text-anchor="end" '
                     f'font-size="13">{name}</text>')
        parts.append(f'<rect x="{_LABEL_W}" y="{y}" width="{w:.1f}" height="{_BAR_H}" '
                     f'fill="{colour}"><title>{name}: {value:.4g}</title></rect>')
        if err:
            lo = max(0.0, value - err) / top * _PLOT_W + _LABEL_W
            hi = min(top, value + err) / top * _PLOT_W + _LABEL_W
            mid = y + _BAR_H / 2
            parts.append(f'<line x1="{lo:.1f}" y1="{mid}" x2="{hi:.1f}" y2="{mid}" '
                         'stroke="#222" stroke-width="1.5"/>')
        label = f"{value:.4g}" + (f" ± {err:.2g}" if err else "")
        parts.append(f'<text x="{_LABEL_W + _PLOT_W + 6}" y="{y + 16}" '
                     f'font-size="13">{html.escape(label)}</text>')
    axis_y = height - 14
    parts.append(f'<line x1="{_LABEL_W}" y1="{axis_y}" x2="{_LABEL_W + _PLOT_W}" '
                 f'y2="{axis_y}" stroke="#888"/>')
    for frac in (0.0, 0.5, 1.0):
        x = _LABEL_W + frac * _PLOT_W
        parts.append(f'<text x="{x:.1f}" y="{height - 2}" font-size="11" text-anchor="middle" '
                     f'fill="#666">{top * frac:.3g}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def _chart_rows(frame: Any, task: str) -> tuple[str, list[tuple[str, float, float | None]]]:
    chosen = frame[(frame["task"] == task) & frame["primary"]]
    chosen = chosen.sort_values("invocation_id").drop_duplicates("model", keep="last")
    chosen = chosen.sort_values("value", ascending=False)
    metric = str(chosen["metric"].iloc[0]) if len(chosen) else ""
    if len(chosen) and chosen["filter"].iloc[0]:
        metric += f" ({chosen['filter'].iloc[0]})"
    rows = [(str(r.model), float(r.value),
             None if r.stderr is None or r.stderr != r.stderr else float(r.stderr))
            for r in chosen.itertuples()]
    return metric, rows


def html_report(frame: Any, title: str = "hpceval results") -> str:
    board = leaderboard(frame)
    runs = sorted(frame["invocation_id"].unique()) if not frame.empty else []
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
           f"<h1>{html.escape(title)}</h1>",
           f'<p class="meta">{len(runs)} run(s): {html.escape(", ".join(runs))}. '
           f"Generated {html.escape(time.strftime('%Y-%m-%d %H:%M'))} by hpceval.</p>"]
    if frame.empty:
        out.append("<p>No finished tasks yet.</p></body></html>")
        return "\n".join(out) + "\n"
    out.append("<h2>Leaderboard (primary metric per task)</h2>")
    out.append(board.to_html(float_format=lambda v: f"{v:.4g}", na_rep="", escape=True))
    for task in sorted(frame["task"].unique()):
        metric, rows = _chart_rows(frame, task)
        out.append(f"<h2>{html.escape(task)}</h2>")
        out.append(task_chart(task, rows, metric))
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def write_report(frame: Any, path: Path, title: str = "hpceval results") -> None:
    atomic_write_text(path, html_report(frame, title))
