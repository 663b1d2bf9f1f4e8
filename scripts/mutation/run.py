"""Mutation testing of hpceval's decision modules (issue 39). Not part of .ci/run: minutes, not
seconds. Run it before a release, and when you change a decision module.

    python scripts/mutation/run.py audit [M2 M8 ...]   # the audit's hand-made mutants
    python scripts/mutation/run.py score [DECISION ...] # mutmut over the decision modules

Both work in a throwaway copy of the checkout (tracked and untracked, not ignored, files), so
a crash never leaves a mutant in your tree; the copy's `hpceval` is the one imported
(PYTHONPATH), never the editable install's. `audit` applies each mutant of
scripts/mutation/decisions.py's AUDIT, runs its tests and says caught or survived; it exits 1
if any survived. `score` runs mutmut (pinned in the `mutation` extra) once over every module
of the chosen decisions with the union of their tests: mutmut runs for each mutant only the
selected tests that reached the mutated function. It prints the score per decision (killed or
timed out, of all mutants; a mutant no selected test reaches counts as survived) as a Markdown
table for docs/testing.md, and with --survivors each survivor's diff.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from decisions import AUDIT, DECISIONS, Mutant

ROOT = Path(__file__).resolve().parents[2]
PYTEST = ["-q", "-x", "-p", "no:cacheprovider", "-m", "not slurm"]
# Fails in mutmut's clean run (pytest inside mutmut's process, after ~1000 other tests) and
# passes alone, in its file, and in that order under plain pytest: the job script's health
# wait, not a decision module, so it is left out of `score` rather than chased here.
MUTMUT_DESELECT = ["tests/render/test_job_trust.py::"
                   "test_an_answer_on_the_port_is_not_the_jobs_server_until_its_log_says_so"]
# mutmut's exit codes (mutmut.stats.status_by_exit_code) that count as a caught mutant
CAUGHT = {"killed", "timeout", "caught by type check", "segfault"}


def copy_checkout(dest: Path) -> Path:
    """Tracked and untracked-but-not-ignored files of the checkout, as they are now."""
    # safe.directory: an ordinary user may audit a checkout root owns (issue 39's M9)
    files = subprocess.run(["git", "-c", f"safe.directory={ROOT}", "ls-files", "-co",
                            "--exclude-standard", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.split(b"\0")
    for name in filter(None, files):
        src = ROOT / os.fsdecode(name)
        if src.is_file():
            target = dest / os.fsdecode(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
    return dest


def _env(copy: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}


def _pytest(copy: Path, tests: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", *PYTEST, *dict.fromkeys(tests)],
                          cwd=copy, env=_env(copy), capture_output=True, text=True,
                          check=False)


def _summary(out: str) -> str:
    lines = [line for line in out.splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def audit(names: list[str]) -> int:
    chosen = [m for m in AUDIT if not names or m.name in names]
    unknown = set(names) - {m.name for m in AUDIT}
    if unknown:
        sys.exit(f"unknown mutant(s) {sorted(unknown)}; known: {[m.name for m in AUDIT]}")
    survived = []
    with tempfile.TemporaryDirectory(prefix="hpceval-audit-") as tmp:
        copy = copy_checkout(Path(tmp))
        where = subprocess.run([sys.executable, "-c", "import hpceval; print(hpceval.__file__)"],
                               cwd=copy, env=_env(copy), capture_output=True, text=True,
                               check=True).stdout.strip()
        if not where.startswith(str(copy)):
            sys.exit(f"the copy's hpceval is not the one imported ({where}): not auditing")
        for mutant in chosen:
            outcome = _one(copy, mutant)
            print(f"{mutant.name:4} {outcome:8} {mutant.path}: {mutant.breaks}", flush=True)
            if outcome == "SURVIVED":
                survived.append(mutant.name)
    print(f"\n{len(chosen) - len(survived)} of {len(chosen)} caught"
          + (f"; survived: {' '.join(survived)}" if survived else ""))
    return 1 if survived else 0


def _one(copy: Path, mutant: Mutant) -> str:
    path = copy / mutant.path
    text = path.read_text(encoding="utf-8")
    if text.count(mutant.old) != 1:
        return "STALE"  # the code moved on: the mutant no longer applies (fix decisions.py)
    baseline = _pytest(copy, mutant.tests)
    if baseline.returncode != 0:
        print(baseline.stdout[-3000:], file=sys.stderr)
        return "BASELINE FAILED"
    path.write_text(text.replace(mutant.old, mutant.new), encoding="utf-8")
    try:
        result = _pytest(copy, mutant.tests)
    finally:
        path.write_text(text, encoding="utf-8")
    return "caught" if result.returncode == 1 else "SURVIVED" if result.returncode == 0 \
        else f"error {result.returncode}: {_summary(result.stdout)}"


def score(names: list[str], workdir: Path | None, survivors: bool) -> int:
    unknown = set(names) - set(DECISIONS)
    if unknown:
        sys.exit(f"unknown decision(s) {sorted(unknown)}; known: {sorted(DECISIONS)}")
    chosen = {n: DECISIONS[n] for n in (names or DECISIONS)}
    modules = sorted({m for mods, _ in chosen.values() for m in mods})
    tests = sorted({t for _, ts in chosen.values() for t in ts})
    with tempfile.TemporaryDirectory(prefix="hpceval-mutmut-") as tmp:
        copy = copy_checkout(workdir or Path(tmp))
        _configure(copy, modules, tests)
        started = time.monotonic()
        log = copy / "mutmut.log"
        with log.open("w") as handle:
            run = subprocess.run([sys.executable, "-m", "mutmut", "run"], cwd=copy,
                                 env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
                                 stdout=handle, stderr=subprocess.STDOUT, check=False)
        took = time.monotonic() - started
        if run.returncode != 0:
            print(log.read_text(errors="replace")[-4000:], file=sys.stderr)
            sys.exit(f"mutmut run failed (exit {run.returncode}); log above")
        counts = {m: _statuses(copy, m) for m in modules}
        print(_table(chosen, counts))
        print(f"\n{sum(sum(c.values()) for c in counts.values())} mutants, "
              f"{len(tests)} test files, {took:.0f} s on {os.cpu_count()} cores")
        if survivors:
            _show_survivors(copy, counts)
        (copy / "scores.json").write_text(json.dumps(
            {m: dict(c) for m, c in counts.items()}, indent=1))
    return 0


def _configure(copy: Path, modules: list[str], tests: list[str]) -> None:
    """mutmut reads [tool.mutmut] from the copy's pyproject.toml; the checkout's stays as it is."""
    config = "\n".join([
        "", "[tool.mutmut]", 'source_paths = ["hpceval"]',
        'also_copy = ["site-configs", "templates", "scripts"]',
        f"only_mutate = {json.dumps(modules)}",
        "pytest_add_cli_args = " + json.dumps(
            ["-p", "no:cacheprovider", "-m", "not slurm",
             *(arg for test in MUTMUT_DESELECT for arg in ("--deselect", test))]),
        f"pytest_add_cli_args_test_selection = {json.dumps(tests)}", ""])
    with (copy / "pyproject.toml").open("a", encoding="utf-8") as handle:
        handle.write(config)


def _statuses(copy: Path, module: str) -> Counter[str]:
    from mutmut.stats import status_by_exit_code

    meta = copy / "mutants" / f"{module}.meta"
    codes = json.loads(meta.read_text())["exit_code_by_key"] if meta.is_file() else {}
    return Counter(status_by_exit_code[code] for code in codes.values())


def _table(chosen: dict[str, tuple[tuple[str, ...], tuple[str, ...]]],
           counts: dict[str, Counter[str]]) -> str:
    rows = ["| decision | module | mutants | caught | survived | no test reaches | score |",
            "|---|---|---:|---:|---:|---:|---:|"]
    for decision, (modules, _) in chosen.items():
        for module in modules:
            c = counts[module]
            total = sum(c.values())
            caught = sum(n for status, n in c.items() if status in CAUGHT)
            share = f"{100 * caught / total:.0f} %" if total else "-"
            rows.append(f"| {decision} | `{module}` | {total} | {caught} | "
                        f"{c['survived'] + c['suspicious']} | {c['no tests']} | {share} |")
    return "\n".join(rows)


def _show_survivors(copy: Path, counts: dict[str, Counter[str]]) -> None:
    from mutmut.stats import status_by_exit_code

    for module in counts:
        meta = copy / "mutants" / f"{module}.meta"
        if not meta.is_file():
            continue
        for key, code in sorted(json.loads(meta.read_text())["exit_code_by_key"].items()):
            if status_by_exit_code[code] not in CAUGHT:
                shown = subprocess.run([sys.executable, "-m", "mutmut", "show", key], cwd=copy,
                                       capture_output=True, text=True, check=False)
                print(f"\n{shown.stdout.strip()}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    a = sub.add_parser("audit", help="rerun the audit's hand-made mutants")
    a.add_argument("names", nargs="*", help="M1 ... M15 (default: all)")
    s = sub.add_parser("score", help="mutmut over the decision modules")
    s.add_argument("names", nargs="*", help=f"decisions (default: all): {', '.join(DECISIONS)}")
    s.add_argument("--workdir", type=Path, help="keep the copy (and mutmut's results) here")
    s.add_argument("--survivors", action="store_true", help="print each survivor's diff")
    args = parser.parse_args()
    if args.command == "audit":
        return audit(args.names)
    return score(args.names, args.workdir, args.survivors)


if __name__ == "__main__":
    sys.exit(main())
