"""hpceval side by side with NeMo Evaluator's launcher, on equivalent configs, in one run.

    .venv/bin/python benchmarks/nemo_compare.py [--json out.json] [--repeat 3]

The launcher (PyPI `nemo-evaluator-launcher`, pinned below) goes into its own venv, created by
this script on first use (benchmarks/.venv-nemo, git-ignored; 1-2 minutes and 440 MB with
PyPI reachable) and reused while it holds the pinned version. It is never a dependency of
hpceval. Timed figures are the median of --repeat whole-process runs of each CLI, both in a
clean HOME; structural figures are counted in the scripts each tool renders for
benchmarks/configs/{hpceval,nemo}/ (benchmarks/nemo_structure.py says how). Nothing is
submitted and no cluster is needed. If the launcher cannot be installed, its column is null
with the reason, never a guess. Once the venv exists: 2-3 minutes on a 2-core VM at load
average 5 from other work, about 1.5 on a quiet one (the launcher's dry-runs are most of it;
the untimed structural ones run side by side).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from nemo_structure import Structure, hpceval_structure, nel_structure  # noqa: E402
from report_json import add_json_option, command_line, row, write_result  # noqa: E402

PIN = "0.2.6"  # the version these configs and nemo_structure.py's patterns were checked with
PACKAGE = "nemo-evaluator-launcher"
CONFIGS = HERE / "configs"
DEFAULT_VENV = HERE / ".venv-nemo"
NETWORK_WORDS = ("connection", "network", "resolve", "timed out", "unreachable", "urlopen")


Row = dict[str, Any]


def pair(metric: str, unit: str, hpceval: Any, launcher: Any, better: str | None = "lower"
         ) -> Row:
    """One row; its baseline_label is set once the launcher's version is known."""
    return row(metric, unit, hpceval, launcher, better=better, with_ratio=better is not None)


@dataclass
class Launcher:
    bin_dir: Path | None
    version: str | None
    problem: str | None = None
    install_s: float | None = None
    notes: list[str] = field(default_factory=list)


def launcher_version(venv: Path) -> str | None:
    python = venv / "bin" / "python"
    if not python.exists():
        return None
    probe = subprocess.run(
        [str(python), "-c", f"import importlib.metadata as m; print(m.version({PACKAGE!r}))"],
        capture_output=True, text=True, check=False)
    return probe.stdout.strip() if probe.returncode == 0 else None


def ensure_launcher(venv: Path, install: bool) -> Launcher:
    """Reuse the venv when it holds the pinned version, else (re)build it with pip."""
    if launcher_version(venv) == PIN:
        return Launcher(venv / "bin", PIN)
    if not install:
        return Launcher(None, None, f"{PACKAGE}=={PIN} is not in {venv} (--no-install given)")
    print(f"installing {PACKAGE}=={PIN} into {venv} (1-2 minutes, 440 MB) ...",
          file=sys.stderr)
    start = time.perf_counter()
    steps = [[sys.executable, "-m", "venv", "--clear", str(venv)],
             [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
              "--disable-pip-version-check", f"{PACKAGE}=={PIN}"]]
    for cmd in steps:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = [line for line in proc.stderr.splitlines()
                    if line.strip() and not line.startswith("WARNING")][-3:]
            return Launcher(None, None, f"could not install {PACKAGE}=={PIN}: `{' '.join(cmd)}` "
                            f"exited {proc.returncode}: {' / '.join(tail) or 'no message'}")
    installed = launcher_version(venv)
    if installed != PIN:
        return Launcher(None, None, f"pip finished but {venv} holds {PACKAGE} {installed}")
    return Launcher(venv / "bin", PIN, install_s=time.perf_counter() - start)


def clean_env(home: Path) -> dict[str, str]:
    """Both tools run with an empty HOME (no user catalogue, no launcher exec-db or logs in the
    real home) and the launcher's telemetry off (dry runs send none; no network attempts)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HPCEVAL_", "NEMO_"))}
    env.update(HOME=str(home), USER=os.environ.get("USER", "bench"),
               NEMO_EVALUATOR_TELEMETRY_LEVEL="0", PYTHONDONTWRITEBYTECODE="0")
    return env


@dataclass
class Timed:
    seconds: float | None
    stdout: str
    problem: str | None


def timed(cmd: list[str], env: dict[str, str], repeat: int, warm: bool = False) -> Timed:
    """Median wall time of `repeat` whole-process runs; a failing command gives its reason."""
    if warm:  # page cache and .pyc files, so the first sample is not an outlier
        subprocess.run(cmd, env=env, capture_output=True, check=False)
    samples: list[float] = []
    out = ""
    for _ in range(repeat):
        start = time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        samples.append(time.perf_counter() - start)
        if proc.returncode != 0:
            lines = [ln for ln in proc.stderr.splitlines() if ln.strip()][-2:]
            return Timed(None, proc.stdout, f"`{Path(cmd[0]).name} {' '.join(cmd[1:3])}` exited "
                         f"{proc.returncode}: {' / '.join(lines)}")
        out = proc.stdout
    return Timed(round(statistics.median(samples), 4), out, None)


def needs_network(problem: str | None) -> bool:
    return problem is not None and any(w in problem.lower() for w in NETWORK_WORDS)


def count_tasks(stdout: str, pattern: str) -> int | None:
    """The catalogue size from `ls tasks`' own summary lines (one per harness for the launcher)."""
    found = re.findall(pattern, stdout, re.M)
    return sum(int(n) for n in found) if found else None


def sweep_overrides() -> list[list[str]]:
    """One launcher invocation per model of the hpceval sweep file (the launcher has no sweep)."""
    run = yaml.safe_load((CONFIGS / "hpceval" / "sweep3x5.yaml").read_text())
    return [[f"-o deployment.checkpoint_path={m['checkpoint_path']}",
             f"-o deployment.served_model_name={m['name']}"] for m in run["models"]]


def nel_dry_run(bin_dir: Path, config: Path, overrides: list[str], env: dict[str, str]
                ) -> tuple[str | None, str | None]:
    cmd = [str(bin_dir / PACKAGE), "run", "--config", str(config), "--dry-run"]
    for item in overrides:
        cmd += item.split(" ", 1)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = [ln for ln in proc.stderr.splitlines() if ln.strip()][-2:]
        return None, f"dry-run of {config.name} exited {proc.returncode}: {' / '.join(tail)}"
    return proc.stdout, None


def measure(repeat: int, render_repeat: int, launcher: Launcher, home: Path
            ) -> tuple[list[Row], list[str]]:
    env = clean_env(home)
    notes: list[str] = []
    hpc_bin = Path(sys.executable).parent
    nel = launcher.bin_dir
    hpc_cli = [str(hpc_bin / "hpceval")]
    nel_cli = [str(nel / PACKAGE)] if nel else None

    def both(hpc_cmd: list[str], nel_args: list[str] | None, warm: bool = False,
             runs: int = repeat) -> tuple[Timed, Timed | None]:
        hpc = timed(hpc_cmd, env, runs, warm)
        if hpc.problem:
            raise SystemExit(f"nemo_compare: hpceval failed: {hpc.problem}")
        if nel_args is None:
            return hpc, None
        other = timed(nel_args, env, runs, warm)
        if other.problem:
            notes.append(f"launcher: {other.problem}")
        return hpc, other

    rows: list[Row] = []
    bare = both([sys.executable, "-c", "pass"],
                [str(nel / "python"), "-c", "pass"] if nel else None, warm=True)
    helps = both([*hpc_cli, "--help"], [*nel_cli, "--help"] if nel_cli else None, warm=True)
    rows.append(pair("CLI start-up: `--help`", "s", helps[0].seconds,
                    helps[1].seconds if helps[1] else None))
    rows.append(pair("bare interpreter: `python -c pass` of each venv", "s", bare[0].seconds,
                    bare[1].seconds if bare[1] else None))
    def over_bare(i: int) -> float | None:
        h, b = helps[i], bare[i]
        return round(h.seconds / b.seconds, 2) if h and b and h.seconds and b.seconds else None

    rows.append(pair("`--help` as a multiple of its own venv's bare interpreter", "x",
                    over_bare(0), over_bare(1)))

    run7 = both([*hpc_cli, "submit", "--dry-run", str(CONFIGS / "hpceval" / "run7.yaml")],
                [*nel_cli, "run", "--config", str(CONFIGS / "nemo" / "run7.yaml"), "--dry-run"]
                if nel_cli else None, runs=render_repeat)
    rows.append(pair("validate + render a 7-task Slurm run (`submit --dry-run` / `run --dry-run`)",
                    "s", run7[0].seconds, run7[1].seconds if run7[1] else None))

    ls = both([*hpc_cli, "ls", "tasks"], [*nel_cli, "ls", "tasks"] if nel_cli else None)
    nel_ls: float | str | None = ls[1].seconds if ls[1] else None
    if ls[1] and needs_network(ls[1].problem):
        nel_ls = "needs network"
    rows.append(pair("`ls tasks`", "s", ls[0].seconds, nel_ls))
    rows.append(pair("tasks listed by `ls tasks`", "",
                    count_tasks(ls[0].stdout, r"^(\d+) tasks? in \d+ harness"),
                    count_tasks(ls[1].stdout, r"^\s*(\d+) tasks? available") if ls[1] else None,
                    better=None))
    if nel and run7[1] and run7[1].seconds:
        seven = nel_structure([run7[1].stdout])
        ours = hpceval_structure(CONFIGS / "hpceval" / "run7.yaml")
        notes.append(f"7-task run: hpceval renders {ours.jobs} job(s) with {ours.server_starts} "
                     "server start(s) (with the CPU job that pulls the tasks' images first); "
                     f"the launcher {seven.jobs} jobs with {seven.server_starts} server starts")
    rows += structural_rows(nel, env, notes)
    return rows, notes


def structural_rows(nel: Path | None, env: dict[str, str], notes: list[str]) -> list[Row]:
    hpc_sweep = hpceval_structure(CONFIGS / "hpceval" / "sweep3x5.yaml")
    hpc_dp = hpceval_structure(CONFIGS / "hpceval" / "dp2x8.yaml")
    nel_sweep = nel_dp = nel_no_dp = None
    if nel is not None:
        jobs = [(CONFIGS / "nemo" / "sweep3x5.yaml", o) for o in sweep_overrides()]
        jobs += [(CONFIGS / "nemo" / "dp2x8.yaml", []), (CONFIGS / "nemo" / "dp2x8_no_dp.yaml", [])]
        # not timed: renders run side by side to stay inside the time budget
        with ThreadPoolExecutor(max_workers=3) as pool:
            outs = list(pool.map(lambda j: nel_dry_run(nel, j[0], j[1], env), jobs))
        notes += [problem for _, problem in outs if problem]
        texts = [text for text, _ in outs]

        def read(outputs: list[str | None], what: str) -> Structure | None:
            if not all(outputs):
                return None
            found = nel_structure([t for t in outputs if t])
            if found.server_starts == 0:  # every config here deploys vLLM: the layout changed
                notes.append(f"launcher {what}: no server launch found in its dry-run output "
                             "(output format differs from 0.2.x?); not counted")
                return None
            return found

        nel_sweep = read(texts[:-2], "3x5 sweep")
        nel_dp = read(texts[-2:-1], "dp2x8")
        nel_no_dp = read(texts[-1:], "dp2x8_no_dp")
        if nel_no_dp:
            notes.append(f"DP size not written (nemo/dp2x8_no_dp.yaml): the launcher's dry-run "
                         f"exits 0 and renders {nel_no_dp.gpus_serving} of "
                         f"{nel_no_dp.gpus_allocated} allocated GPUs serving; hpceval has no DP "
                         "key to forget (it tiles the allocation, and refuses a TP x PP that "
                         "would leave GPUs idle)")

    def counted(metric: str, hpc: Structure, other: Structure | None, attr: str) -> Row:
        return pair(metric, "", getattr(hpc, attr), getattr(other, attr) if other else None)

    sweep = "3 models x 5 tasks"
    dp = "2 nodes x 8 GPUs, TP=2, data parallel"
    return [
        counted(f"{sweep}: sbatch calls at submit", hpc_sweep, nel_sweep, "submit_sbatch"),
        counted(f"{sweep}: jobs the scheduler starts", hpc_sweep, nel_sweep, "jobs"),
        counted(f"{sweep}: sbatch calls every job makes when it starts", hpc_sweep, nel_sweep,
                "start_sbatch"),
        counted(f"{sweep}: model loads (server starts)", hpc_sweep, nel_sweep, "server_starts"),
        counted(f"{dp}: GPUs allocated", hpc_dp, nel_dp, "gpus_allocated"),
        pair(f"{dp}: GPUs serving requests", "", hpc_dp.gpus_serving,
             nel_dp.gpus_serving if nel_dp else None, better="higher"),
        pair(f"{dp}: model replicas", "", hpc_dp.replicas, nel_dp.replicas if nel_dp else None,
             better="higher"),
        pair(f"{dp}, DP size not written: GPUs serving requests", "", hpc_dp.gpus_serving,
             nel_no_dp.gpus_serving if nel_no_dp else None, better="higher"),
    ]


def fmt(value: float | int | str | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def markdown(rows: list[Row], label: str, notes: list[str]) -> str:
    lines = [f"| metric | unit | hpceval | {label} | ratio (hpceval / launcher) |",
             "|---|---|---:|---:|---:|"]
    lines += [f"| {r['metric']} | {r['unit']} | {fmt(r['hpceval'])} | {fmt(r['baseline'])} | "
              f"{fmt(r['ratio'])} |" for r in rows]
    return "\n".join(lines + [""] + [f"- {n}" for n in notes]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_json_option(parser)
    parser.add_argument("--repeat", type=int, default=3,
                        help="whole-process runs per timed figure; the median is kept")
    parser.add_argument("--render-repeat", type=int, default=1,
                        help="runs of the timed 7-task dry-run (the launcher's takes 20-60 s)")
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV,
                        help="the launcher's own venv (created if missing)")
    parser.add_argument("--quick", action="store_true", help="one run per timed figure")
    parser.add_argument("--no-install", action="store_true",
                        help="never pip-install the launcher; its column is null if absent")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeat = 1
    if min(args.repeat, args.render_repeat) < 1:
        parser.error("--repeat and --render-repeat must be at least 1")
    start = time.perf_counter()
    launcher = ensure_launcher(args.venv, not args.no_install)
    label = f"{PACKAGE} {launcher.version or PIN}"
    notes = [f"timings: median of {args.repeat} whole-process runs ({args.render_repeat} for "
             "the 7-task dry-run) on this machine, both tools with a clean HOME"]
    if launcher.bin_dir:
        notes.append(f"{label} in its own venv ({args.venv}), telemetry off")
    if launcher.install_s is not None:
        notes.append(f"launcher installed in this run: {launcher.install_s:.0f} s")
    if launcher.problem:
        notes.append(f"LAUNCHER NOT AVAILABLE: {launcher.problem}; its column is null")
        print(f"nemo_compare: {launcher.problem}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="nemo-compare-home-") as home:
        rows, more = measure(args.repeat, args.render_repeat, launcher, Path(home))
    notes += [*more,
        "launcher jobs and sbatch calls: one run.sub per task in its dry-run, each submitted "
        "with its own sbatch; each run.sub also submits its auto-resume successor "
        "(`sbatch --dependency=afternotok`) as soon as it starts, even when nothing fails",
        "hpceval: one array job (one element per model, one server for all its tasks) and a "
        "dependent aggregation job; a successor is submitted only on the walltime signal",
        "GPUs serving: TP x PP x DP of each rendered server command, capped at the GPUs its "
        "node slice holds (benchmarks/nemo_structure.py)",
        f"total wall time of this benchmark: {time.perf_counter() - start:.0f} s"]
    print(markdown(rows, label, notes), end="")
    for item in rows:
        item["baseline_label"] = label
    write_result(args.json, name="nemo", title="hpceval vs NeMo Evaluator's launcher",
                 command=command_line("nemo_compare.py", argv), rows=rows, notes=notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
