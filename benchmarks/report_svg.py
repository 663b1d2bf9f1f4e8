"""The report's plot as plain SVG (matplotlib is not a dependency of hpceval).

Top panel: every row that has a ratio, as a bar from 1x on a log scale, green where hpceval is
on the good side of its baseline (`better`), red where it is not, grey when neither is said.
Below: one line chart per section that sent `series` ({"name": {"x": [...], "y": [...]}}, and
optionally "x_label").
A failed section shows as a line of red text, so the plot never hides a failure.
"""

from __future__ import annotations

import html
import math
from typing import Any

from report_md import Outcome

WIDTH, LABEL_W, ROW_H, PAD = 960, 470, 20, 14
PLOT_W = WIDTH - LABEL_W - 110
GOOD, BAD, NEUTRAL, FAIL = "#228833", "#cc3311", "#999999", "#cc3311"
LINES = ("#4477aa", "#ee6677", "#228833", "#ccbb44", "#66ccee", "#aa3377")
DECADES = 3  # the ratio axis spans 10^-3 .. 10^3; further out is clamped (the label is exact)


def _text(x: float, y: float, text: str, *, size: int = 12, anchor: str = "start",
          fill: str = "#222", weight: str = "normal") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
            f'fill="{fill}" font-weight="{weight}">{html.escape(text)}</text>')


def _short(text: str, limit: int = 72) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _colour(ratio: float, better: Any) -> str:
    if better == "lower":
        return GOOD if ratio <= 1 else BAD
    if better == "higher":
        return GOOD if ratio >= 1 else BAD
    return NEUTRAL


def ratio_panel(outcomes: list[Outcome], top: float) -> tuple[list[str], float]:
    parts = [_text(PAD, top + 16, "hpceval / baseline (log scale; 1x = same as baseline)",
                   size=14, weight="bold")]
    y = top + 30
    centre = LABEL_W + PLOT_W / 2
    half = PLOT_W / 2
    first_row = y
    for o in outcomes:
        if not o.ok:
            parts.append(_text(PAD, y + 14, f"{o.title}: FAILED", fill=FAIL, weight="bold"))
            y += ROW_H
            continue
        rows = [r for r in (o.result or {}).get("rows", [])
                if isinstance(r.get("ratio"), (int, float)) and r["ratio"] > 0]
        if not rows:
            continue
        parts.append(_text(PAD, y + 14, o.title, weight="bold"))
        y += ROW_H
        for r in rows:
            value = float(r["ratio"])
            pos = max(-1.0, min(1.0, math.log10(value) / DECADES))
            x0, x1 = sorted((centre, centre + pos * half))
            parts.append(_text(PAD + 12, y + 14, _short(str(r["metric"]))))
            parts.append(f'<rect x="{x0:.1f}" y="{y + 3}" width="{max(1.0, x1 - x0):.1f}" '
                         f'height="{ROW_H - 6}" fill="{_colour(value, r.get("better"))}">'
                         f'<title>{html.escape(str(r["metric"]))}: {value:.3g}x</title></rect>')
            parts.append(_text(LABEL_W + PLOT_W + 8, y + 14, f"{value:.3g}x"))
            y += ROW_H
    for k in range(-DECADES, DECADES + 1):  # the axis: one tick per decade
        x = centre + k / DECADES * half
        colour = "#444" if k == 0 else "#ddd"
        parts.append(f'<line x1="{x:.1f}" y1="{first_row}" x2="{x:.1f}" y2="{y}" '
                     f'stroke="{colour}"/>')
        parts.append(_text(x, y + 14, f"{10.0 ** k:g}x", size=10, anchor="middle",
                           fill="#666"))
    return parts, y + 24


def _scale(values: list[float], lo_px: float, hi_px: float, log: bool
           ) -> tuple[Any, float, float]:
    lo, hi = min(values), max(values)
    if log:
        lo, hi = math.log10(lo), math.log10(hi)
    if hi == lo:
        lo, hi = lo - 1, hi + 1

    def to_px(v: float) -> float:
        w = math.log10(v) if log else v
        return lo_px + (w - lo) / (hi - lo) * (hi_px - lo_px)

    return to_px, min(values), max(values)


def series_panel(title: str, series: dict[str, Any], top: float) -> tuple[list[str], float]:
    lines = {name: (list(map(float, s["x"])), list(map(float, s["y"])))
             for name, s in series.items()
             if isinstance(s, dict) and len(s.get("x", [])) == len(s.get("y", [])) > 0}
    if not lines:
        return [], top
    height = 200
    left, right = LABEL_W - 180, LABEL_W + PLOT_W - 120
    plot_top, plot_bottom = top + 30, top + 30 + height
    xs = [v for x_values, _ in lines.values() for v in x_values]
    ys = [v for _, y_values in lines.values() for v in y_values]
    log_x = min(xs) > 0 and max(xs) / min(xs) >= 20
    log_y = min(ys) > 0 and max(ys) / min(ys) >= 20
    fx, x_lo, x_hi = _scale(xs, left, right, log_x)
    fy, y_lo, y_hi = _scale(ys, plot_bottom, plot_top, log_y)
    parts = [_text(PAD, top + 16, title, size=14, weight="bold"),
             f'<rect x="{left}" y="{plot_top}" width="{right - left}" height="{height}" '
             'fill="none" stroke="#888"/>',
             _text(left - 6, plot_top + 10, number_label(y_hi), size=10, anchor="end"),
             _text(left - 6, plot_bottom, number_label(y_lo), size=10, anchor="end"),
             _text(left, plot_bottom + 14, number_label(x_lo), size=10, anchor="middle"),
             _text(right, plot_bottom + 14, number_label(x_hi), size=10, anchor="middle")]
    x_label = next((str(s["x_label"]) for s in series.values()
                    if isinstance(s, dict) and s.get("x_label")), "")
    scale_note = ", ".join(n for n, on in (("x log", log_x), ("y log", log_y)) if on)
    axis_note = "; ".join(t for t in (f"x: {x_label}" if x_label else "", scale_note) if t)
    if axis_note:
        parts.append(_text((left + right) / 2, plot_bottom + 28, axis_note, size=11,
                           anchor="middle", fill="#444"))
    for i, (name, (x_values, y_values)) in enumerate(lines.items()):
        colour = LINES[i % len(LINES)]
        points = " ".join(f"{fx(x):.1f},{fy(y):.1f}" for x, y in zip(x_values, y_values,
                                                                    strict=True))
        parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}" '
                     'stroke-width="2"/>')
        for x, y in zip(x_values, y_values, strict=True):
            parts.append(f'<circle cx="{fx(x):.1f}" cy="{fy(y):.1f}" r="3" fill="{colour}">'
                         f'<title>{html.escape(name)}: x={x:g}, y={y:g}</title></circle>')
        legend_y = plot_top + 14 + i * 16
        parts.append(f'<rect x="{right + 10}" y="{legend_y - 9}" width="10" height="10" '
                     f'fill="{colour}"/>')
        parts.append(_text(right + 24, legend_y, _short(name, 34), size=11))
    return parts, plot_bottom + 40


def number_label(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def report_svg(outcomes: list[Outcome]) -> str:
    parts, y = ratio_panel(outcomes, PAD)
    for o in outcomes:
        series = (o.result or {}).get("series") if o.ok else None
        if isinstance(series, dict) and series:
            more, y = series_panel(o.title, series, y)
            parts += more
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{y + PAD:.0f}" '
            f'viewBox="0 0 {WIDTH} {y + PAD:.0f}" font-family="system-ui, sans-serif">'
            '<title>hpceval benchmarks</title>'
            f'<rect width="{WIDTH}" height="{y + PAD:.0f}" fill="white"/>')
    return "\n".join([head, *parts, "</svg>"]) + "\n"
