"""``hpceval compare A B`` and ``hpceval gate --policy FILE A B``.

A side (A or B) is one of:

* ``RUN``: an invocation id, a unique prefix of one, or a run directory (a run of one model);
* ``RUN:MODEL``: one model of a run (two models of one sweep: ``RUN:m1 RUN:m2``);
* ``WATCH:STEP``: the run a checkpoint watch submitted for that training step;
* ``MODEL``: that model across every known run; per task, the run that counts is the newest
  one that finished it (results.table.counting_rows), and the table says which run it was.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from hpceval.cli.track_cmds import output_dir_option


def _fmt(v: float | None, spec: str = ".4g") -> str:
    return "" if v is None else format(v, spec)


def _table(diffs: list[Any], decisions: list[Any] | None = None) -> str:
    head = ["task", "A (run)", "B (run)", "B - A", "interval (method)", "p (Holm)", "test",
            "verdict" if decisions is None else "decision"]
    rows = []
    for i, d in enumerate(diffs):
        a = f"{d.a.value:.4g} ({d.a.run})" if d.a else "-"
        b = f"{d.b.value:.4g} ({d.b.run})" if d.b else "-"
        ci = d.interval.text() if d.interval else ""
        p = _fmt(d.p_value, ".3g") + (f" ({d.p_adjusted:.3g})" if d.p_adjusted is not None
                                      else "")
        last = d.verdict if decisions is None else decisions[i].decision
        rows.append([d.task, a, b, _fmt(d.diff, "+.4g"), ci, p, d.test, last])
    widths = [max(len(str(r[c])) for r in [head, *rows]) for c in range(len(head))]
    lines = ["  ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=True)).rstrip()
             for r in [head, *rows]]
    for i, d in enumerate(diffs):
        notes = [d.note] if d.note else []
        if decisions is not None:
            notes.insert(0, decisions[i].reason)
        for side, s in (("A", d.a), ("B", d.b)):
            if s and s.interval:
                notes.append(f"{side} = {s.model}: {s.value:.4g}, {s.interval.text()}")
            if decisions is not None and side == "B":
                continue  # the gate says what each of B's flags did, below
            for flag in s.flags if s else []:
                # the gate acts on the candidate's flags only: the baseline's inform
                notes.append(f"FLAG {side}: {flag.text()}"
                             + (" (the baseline's: decides nothing)" if decisions else ""))
        for done in decisions[i].flags if decisions is not None else []:
            notes.append(f"FLAG B: {done.text()}")
        if d.mde is not None:
            notes.append(f"minimum detectable effect at n={d.paired.n if d.paired else '?'}: "
                         f"{d.mde:.3g}")
        lines += [f"  {d.task}: {n}" for n in notes]
    return "\n".join(lines) + "\n"


@click.command()
@click.argument("a", metavar="A")
@click.argument("b", metavar="B")
@click.option("--task", "tasks", multiple=True, help="Only this task (repeatable).")
@click.option("--alpha", default=0.05, show_default=True, type=click.FloatRange(0, 1,
              min_open=True, max_open=True), help="Error rate over the tasks compared (Holm).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@output_dir_option
def compare(a: str, b: str, tasks: tuple[str, ...], alpha: float, as_json: bool,
            output_dirs: tuple[str, ...]) -> None:
    """Per task: A, B, B - A with its interval, p-value, verdict.

    A and B are each RUN, RUN:MODEL (models of one run), WATCH:STEP (checkpoints of a watch),
    or MODEL (its newest finished run per task). Where both sides have the harness's
    per-sample files the test is paired (McNemar exact for 0/1 scores, a permutation test
    otherwise) on the items both scored; otherwise the line says it fell back to the marginal
    numbers. p-values are Holm-adjusted across the tasks.
    """
    from hpceval import api

    try:
        diffs = api.compare(a, b, tasks=tasks, alpha=alpha, output_dirs=output_dirs)
    except api.SideNotFound as exc:  # click's own wording for a bad argument, as before
        raise click.BadParameter(exc.message) from exc
    if as_json:
        click.echo(json.dumps({"a": a, "b": b, "alpha": alpha,
                               "tasks": [d.as_dict() for d in diffs]}, indent=2))
        return
    click.echo(_table(diffs), nl=False)


@click.command()
@click.option("--policy", "policy_file", required=True, type=click.Path(dir_okay=False,
              path_type=Path),
              help="YAML: alpha, max_drop, min_gain, flags, and per task overrides.")
@click.argument("a", metavar="A")
@click.argument("b", metavar="B")
@click.option("--task", "tasks", multiple=True, help="Only this task (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@output_dir_option
def gate(policy_file: Path, a: str, b: str, tasks: tuple[str, ...], as_json: bool,
         output_dirs: tuple[str, ...]) -> None:
    """Decide whether candidate B may replace baseline A: exit 0 GO, 1 NO-GO, 3 INCONCLUSIVE.

    The policy (YAML): `alpha` (default 0.05), `max_drop` (how far B may fall below A,
    default 0), `min_gain` (or: how far B must rise), `flags: {FLAG: ACTION}`, and
    `tasks: {NAME or GLOB: {...}}`. Per task, B - A's interval (level 1 - alpha/tasks)
    entirely above the threshold is GO, entirely below is NO-GO, across it INCONCLUSIVE (not
    enough items to decide). Then each flag on B acts: no-go, inconclusive (no GO), or warn.
    Defaults: all-zero, all-unparsable and missing (finished in A, not in B) no-go; count
    inconclusive; count-unverified, length, reasoning-only warn; all-zero where A scores 0
    too only warns. The output gives each flag's action. Sides as for `hpceval compare`;
    config errors exit 2.
    """
    from hpceval import api

    try:
        result = api.gate(policy_file, a, b, tasks=tasks, output_dirs=output_dirs)
    except api.SideNotFound as exc:  # click's own wording for a bad argument, as before
        raise click.BadParameter(exc.message) from exc
    decisions = list(result.decisions)
    if as_json:
        click.echo(json.dumps({"a": a, "b": b, "decision": result.verdict,
                               "tasks": [d.as_dict() for d in decisions]}, indent=2))
    else:
        click.echo(_table([d.diff for d in decisions], decisions), nl=False)
        click.echo(f"gate: {result.verdict}")
    raise SystemExit(result.exit_code)
