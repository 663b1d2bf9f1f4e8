"""Markdown for the benchmark report: one section per script, its table, notes or failure.

`run_all.py` turns each script's run into an `Outcome` (its JSON, or why there is none) and
asks this module for `benchmarks/out/report.md` and, with --publish, `docs/benchmarks.md`
(the same sections under a machine description and the command that reproduces them).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROW_KEYS = ("metric", "unit", "hpceval", "baseline", "baseline_label", "ratio", "better",
            "target", "ok")


@dataclass(frozen=True)
class Outcome:
    name: str
    script: str
    command: list[str]  # what run_all ran
    returncode: int | None  # None: not started (script missing) or stopped (timed out)
    seconds: float
    result: dict[str, Any] | None = None  # the script's JSON, when valid
    error: str = ""  # why it failed, plus the stderr tail
    log: str = ""  # file with its full stderr

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.result is not None and not self.error

    @property
    def title(self) -> str:
        return str((self.result or {}).get("title") or self.name)


def load_result(path: Path) -> dict[str, Any]:
    """A script's JSON, checked against the interface; ValueError says what is wrong."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ValueError(f"no JSON written to {path}") from exc
    except ValueError as exc:
        raise ValueError(f"{path} is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected an object, got {type(data).__name__}")
    for key in ("name", "title", "command", "rows"):
        if key not in data:
            raise ValueError(f"{path}: missing key {key!r}")
    if not isinstance(data["rows"], list) or not data["rows"]:
        raise ValueError(f"{path}: 'rows' must be a non-empty list")
    for i, r in enumerate(data["rows"]):
        if not isinstance(r, dict) or "metric" not in r or "hpceval" not in r:
            raise ValueError(f"{path}: rows[{i}] needs at least 'metric' and 'hpceval'")
    return data


def number(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.3g}" if abs(value) < 10 else f"{value:,.1f}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def with_unit(value: Any, unit: str | None) -> str:
    text = number(value)
    return f"{text} {unit}" if text and unit and not isinstance(value, str) else text


def verdict(ok: Any) -> str:
    return {True: "met", False: "**MISSED**"}.get(ok, "") if isinstance(ok, bool) else ""


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| measured | hpceval | baseline | ratio | better | target | |",
             "|---|---:|---|---:|---|---|---|"]
    for r in rows:
        unit = r.get("unit") or ""
        base = with_unit(r.get("baseline"), unit)
        if base and r.get("baseline_label"):
            base += f" ({r['baseline_label']})"
        ratio = r.get("ratio")
        ratio_text = f"{ratio:.3g}x" if isinstance(ratio, (int, float)) else ""
        cells = [r["metric"], with_unit(r["hpceval"], unit), base, ratio_text,
                 r.get("better") or "", r.get("target") or "", verdict(r.get("ok"))]
        lines.append("| " + " | ".join(_cell(str(c)) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def section(outcome: Outcome, level: str = "##") -> str:
    out = [f"{level} {outcome.title}", ""]
    if not outcome.ok:
        code = (outcome.error.strip().splitlines() or ["not run"])[0] \
            if outcome.returncode is None else f"exit {outcome.returncode}"
        out += [f"**FAILED** ({code}, after {outcome.seconds:.0f} s): `{outcome.script}`", "",
                "```", outcome.error.strip() or "(no output)", "```", ""]
        if outcome.log:
            out += [f"Full log: `{outcome.log}`", ""]
        return "\n".join(out) + "\n"
    assert outcome.result is not None
    out += [f"`{outcome.result['command']}` ({outcome.seconds:.0f} s)", "",
            table(outcome.result["rows"])]
    notes = [str(n) for n in outcome.result.get("notes") or []]
    out += [f"- {n}" for n in notes]
    return "\n".join(out).rstrip("\n") + "\n\n"


def summary(outcomes: list[Outcome]) -> str:
    lines = ["| section | status | rows | targets met | seconds |", "|---|---|---:|---:|---:|"]
    for o in outcomes:
        rows = ((o.result or {}).get("rows") or []) if o.ok else []
        judged = [r for r in rows if isinstance(r.get("ok"), bool)]
        met = f"{sum(1 for r in judged if r['ok'])}/{len(judged)}" if judged else ""
        status = "ok" if o.ok else "**FAILED**"
        lines.append(f"| {_cell(o.title)} (`{o.name}`) | {status} | {len(rows)} | {met} | "
                     f"{o.seconds:.0f} |")
    return "\n".join(lines) + "\n"


def report(outcomes: list[Outcome], *, command: str, when: str, chart: str | None) -> str:
    failed = [o.name for o in outcomes if not o.ok]
    head = ["# hpceval benchmarks", "", f"{when}: `{command}`", "",
            f"**{len(failed)} of {len(outcomes)} failed: {', '.join(failed)}**" if failed
            else f"All {len(outcomes)} benchmark(s) ran.", "", summary(outcomes)]
    if chart:
        head += [f"![ratios and series]({chart})", ""]
    return "\n".join(head) + "\n" + "".join(section(o) for o in outcomes)


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _first(text: str, prefix: str) -> str:
    for line in text.splitlines():
        if line.startswith(prefix):
            return line.split(":", 1)[-1].split("=", 1)[-1].strip().strip('"')
    return "unknown"


def _output(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return done.stdout.strip() or "unknown"


def machine() -> dict[str, str]:
    """What the figures depend on: CPU, cores, memory, OS, Python, Slurm, hpceval commit."""
    mem = _first(_read("/proc/meminfo"), "MemTotal")
    mem_gib = f"{int(mem.split()[0]) / 2**20:.1f} GiB" if mem[:1].isdigit() else mem
    root = Path(__file__).resolve().parents[1]
    commit = _output(["git", "-C", str(root), "rev-parse", "--short", "HEAD"])
    dirty = _output(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"])
    from hpceval._version import __version__

    return {
        "CPU": _first(_read("/proc/cpuinfo"), "model name"),
        "cores (nproc)": str(len(os.sched_getaffinity(0))),
        "memory": mem_gib,
        "OS": f"{_first(_read('/etc/os-release'), 'PRETTY_NAME')}, kernel {platform.release()}",
        "Python": platform.python_version(),
        "Slurm": _output(["sinfo", "--version"]),
        "hpceval": f"{__version__} (commit {commit}"
                   f"{', with uncommitted changes' if dirty not in ('', 'unknown') else ''})",
    }


def published(outcomes: list[Outcome], *, command: str, when: str, info: dict[str, str],
              chart: str | None) -> str:
    """docs/benchmarks.md: where and how the figures were made, then every section."""
    out = ["# Benchmarks", "",
           "Every figure below comes from one command, run from the repository root (the "
           "dev cluster up: `bash scripts/slurm/start-cluster.sh`):", "", "```bash", command,
           "```", "",
           "Each figure is shown next to a baseline measured **in the same run** on the same "
           "machine, and as their ratio (ratios survive a busy machine better than seconds). "
           "`benchmarks/out/` keeps each script's JSON, Markdown and log.", "",
           f"## Machine ({when})", "", "| | |", "|---|---|"]
    out += [f"| {k} | {_cell(v)} |" for k, v in info.items()]
    out += ["", summary(outcomes)]
    if chart:
        out += [f"![ratio of hpceval to each baseline, and the measured series]({chart})", ""]
    return "\n".join(out) + "\n" + "".join(section(o) for o in outcomes)


def tail(text: str, lines: int = 25) -> str:
    """The last lines of a stream, for the failure block."""
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])
