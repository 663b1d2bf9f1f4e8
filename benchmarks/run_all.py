"""Run every benchmark, then write one Markdown report and one plot.

    .venv/bin/python benchmarks/run_all.py [--quick] [--only NAME ...] [--publish]

Each script runs in its own process with `--json benchmarks/out/NAME.json` (and `--quick` when
asked and the script has it); its Markdown goes to out/NAME.md and its stderr to out/NAME.log.
Then `benchmarks/out/report.md` and `benchmarks/out/report.svg`, and with --publish also
`docs/benchmarks.md` + `docs/benchmarks.svg` with the machine description and this command.
A script that fails (exit status, timeout, no valid JSON) is shown as FAILED with its stderr
tail; the others still run, and run_all exits 1. Most scripts need the Slurm dev cluster
(bash scripts/slurm/start-cluster.sh); the full set takes about 35-60 minutes on 2 cores
(layouts alone about 11, suite 8-25).
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from report_json import ROOT
from report_md import Outcome, load_result, machine, published, report, tail
from report_svg import report_svg

from hpceval.storage import atomic_write_text

# name -> script, in the order they run (and appear in the report)
SCRIPTS: dict[str, str] = {
    "startup": "bench_startup.py",
    "nemo": "nemo_compare.py",
    "status": "status_refresh.py",
    "aggregate": "aggregate_bench.py",
    "report": "report_bench.py",
    "proxy": "proxy_bench.py",
    "resume": "resume_waste.py",
    "vllm": "vllm_bench.py",
    "compile_cache": "compile_cache_bench.py",
    "judge": "judge_loads.py",
    "sweep_submit": "sweep_submit.py",
    "budget_sim": "budget_sim.py",
    "layouts": "layout_bench.py",
    "suite": "suite_bench.py",
}
HERE = Path(__file__).resolve().parent


def has_quick(script: Path) -> bool:
    # Asking `--help` costs a process start per script; the option's literal is enough.
    return '"--quick"' in script.read_text(encoding="utf-8")


def shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def run_one(name: str, script: Path, out: Path, *, quick: bool, timeout_s: float) -> Outcome:
    json_path, log = out / f"{name}.json", out / f"{name}.log"
    json_path.unlink(missing_ok=True)  # a stale file must not pass for this run's figures
    command = [sys.executable, str(script), "--json", str(json_path)]
    if quick and script.is_file() and has_quick(script):
        command.append("--quick")
    if not script.is_file():
        return Outcome(name, shown(script), command, None, 0.0, error=f"{script} not found")
    print(f"run_all: {name}: {shlex.join(command)}", file=sys.stderr, flush=True)
    start = time.perf_counter()
    with (out / f"{name}.md").open("w") as stdout, log.open("w") as stderr:
        process = subprocess.Popen(command, stdout=stdout, stderr=stderr, cwd=ROOT)
        try:
            rc: int | None = process.wait(timeout=timeout_s)
            why = "" if rc == 0 else f"exit status {rc}"
        except subprocess.TimeoutExpired:
            # TERM first: the scripts clean up on it (scancel their held jobs, delete their
            # trees); KILL only if that takes longer than a minute.
            process.terminate()
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            rc, why = None, f"timed out after {timeout_s:g} s"
    seconds = time.perf_counter() - start
    stderr_tail = tail(log.read_text(encoding="utf-8", errors="replace"))
    if why:
        return Outcome(name, shown(script), command, rc, seconds, error=f"{why}\n{stderr_tail}",
                       log=shown(log))
    try:
        result = load_result(json_path)
    except ValueError as exc:
        return Outcome(name, shown(script), command, rc, seconds,
                       error=f"{exc}\n{stderr_tail}", log=shown(log))
    print(f"run_all: {name}: ok in {seconds:.0f} s", file=sys.stderr, flush=True)
    return Outcome(name, shown(script), command, rc, seconds, result=result, log=shown(log))


def write_reports(outcomes: list[Outcome], out: Path, *, command: str,
                  docs: Path | None = None) -> None:
    """report.md + report.svg in `out`; with `docs`, that Markdown file and its .svg too."""
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    out.mkdir(parents=True, exist_ok=True)
    svg = report_svg(outcomes)
    atomic_write_text(out / "report.svg", svg)
    atomic_write_text(out / "report.md", report(outcomes, command=command, when=when,
                                                chart="report.svg"))
    if docs is not None:
        chart = docs.with_suffix(".svg")
        atomic_write_text(chart, svg)
        atomic_write_text(docs, published(outcomes, command=command, when=when,
                                          info=machine(), chart=chart.name))


def parse_args(argv: Sequence[str] | None, names: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="pass --quick to every script that has it (smaller settings)")
    parser.add_argument("--only", nargs="+", choices=list(names), metavar="NAME",
                        help=f"run only these, of: {', '.join(names)}")
    parser.add_argument("--publish", action="store_true",
                        help="also write docs/benchmarks.md (+ .svg) with the machine details")
    parser.add_argument("--out", type=Path, default=HERE / "out",
                        help="folder for the JSON, logs and report (default benchmarks/out)")
    parser.add_argument("--docs", type=Path, default=ROOT / "docs" / "benchmarks.md",
                        help="--publish target (default docs/benchmarks.md)")
    parser.add_argument("--timeout", type=float, default=3600.0,
                        help="seconds before a script is stopped and counted failed (3600)")
    args = parser.parse_args(argv)
    if args.publish and args.only:
        # the published page replaces the whole file: a partial run would drop every section
        # it did not run
        parser.error("--publish runs every benchmark; leave out --only")
    return args


def reproduce(argv: Sequence[str]) -> str:
    """The command line as a reader would type it from the repository root."""
    return shlex.join([".venv/bin/python", "benchmarks/run_all.py", *argv])


def main(argv: Sequence[str] | None = None, scripts: dict[str, str] | None = None,
         folder: Path = HERE) -> int:
    scripts = SCRIPTS if scripts is None else scripts
    args_list = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(args_list, list(scripts))
    chosen = [n for n in scripts if not args.only or n in args.only]
    args.out.mkdir(parents=True, exist_ok=True)
    outcomes = [run_one(name, folder / scripts[name], args.out, quick=args.quick,
                        timeout_s=args.timeout) for name in chosen]
    write_reports(outcomes, args.out, command=reproduce(args_list),
                  docs=args.docs if args.publish else None)
    failed = [o.name for o in outcomes if not o.ok]
    print(f"run_all: report in {args.out / 'report.md'}"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
