"""CLI start-up cost as a ratio to a bare interpreter start, measured side by side.

    .venv/bin/python benchmarks/bench_startup.py [--runs 21] [--quick] [--json PATH]

Prints a Markdown table: median wall time of `python -c pass`, `python -c "import click"`,
`hpceval --help` and `hpceval config show` (a real config resolution), each as a ratio to the
bare interpreter measured in the same run (ratios survive a noisy machine better than seconds);
and what the one registry's plugin discovery costs: a built-in engine found by name (no
entry-point scan) against every engine's name (installed distributions' entry points read).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from report_json import add_json_option, command_line, row, write_result

BASELINE = "python -c pass (baseline)"
CLICK = "python -c 'import click'"
BY_NAME = "a built-in engine by name (no entry-point scan)"
ALL_NAMES = "every engine's name (entry points scanned)"
FIVE = "every name of all five registries (one entry-point read, shared)"
FIVE_CODE = ("from hpceval.engines import ENGINES; from hpceval.runtimes import RUNTIMES; "
             "from hpceval.interceptors import INTERCEPTORS; "
             "from hpceval.tasks.adapters import PARSERS; from hpceval.backends import BACKENDS; "
             "[r.names() for r in (ENGINES, RUNTIMES, INTERCEPTORS, PARSERS, BACKENDS)]")
FIVE_UNSHARED = "the same, entry points read once per registry (the cache cleared before each)"
FIVE_UNSHARED_CODE = (FIVE_CODE.rsplit(";", 1)[0] + "; from hpceval import registry; "
                      "[(registry._installed.cache_clear(), r.names()) for r in "
                      "(ENGINES, RUNTIMES, INTERCEPTORS, PARSERS, BACKENDS)]")

def median_seconds(cmd: list[str], runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="timed runs per command (21)")
    parser.add_argument("--quick", action="store_true", help="5 runs per command")
    add_json_option(parser)
    args = parser.parse_args()
    runs = 5 if args.quick else args.runs
    py = sys.executable
    hpceval = str(Path(py).with_name("hpceval"))
    show = [hpceval, "config", "show", "--profile", "local-dev", "-o", "evaluation.tasks=[x]",
            "-o", "deployment.type=none", "-o", "target.api_endpoint.url=http://h/v1", "-o",
            "target.api_endpoint.model_id=m"]
    cases = {
        BASELINE: [py, "-c", "pass"],
        CLICK: [py, "-c", "import click"],
        "hpceval --help": [hpceval, "--help"],
        "hpceval config show (local-dev)": show,
        BY_NAME: [py, "-c", "from hpceval.engines import engine_for; engine_for('vllm')"],
        ALL_NAMES: [py, "-c", "from hpceval.engines import engine_names; engine_names()"],
        FIVE: [py, "-c", FIVE_CODE],
        FIVE_UNSHARED: [py, "-c", FIVE_UNSHARED_CODE],
    }
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "0")
    for cmd in cases.values():  # warm the page cache and .pyc files
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    times = {name: median_seconds(cmd, runs) for name, cmd in cases.items()}
    base = times[BASELINE]
    print("| command | median ms | ratio to bare python |\n|---|---:|---:|")
    for name, seconds in times.items():
        print(f"| {name} | {seconds * 1000:.1f} | {seconds / base:.2f}x |")
    rows = [row(name, "ms", round(seconds * 1000, 1), round(base * 1000, 1),
                baseline_label="floor: python -c pass")
            for name, seconds in times.items() if name not in (BASELINE, CLICK)]
    write_result(args.json, name="startup", title="CLI start-up", rows=rows,
                 command=command_line("bench_startup.py"),
                 notes=[f"Median of {runs} runs per command after one untimed run (warm page "
                        "cache and .pyc files); each as a ratio to a bare interpreter start "
                        "measured in the same run.",
                        f"For reference, {CLICK} took {times[CLICK] * 1000:.1f} ms.",
                        f"Plugin discovery (hpceval/registry.py): {ALL_NAMES} took "
                        f"{times[ALL_NAMES] / times[BY_NAME]:.2f}x {BY_NAME}; {FIVE} took "
                        f"{times[FIVE] / times[FIVE_UNSHARED]:.2f}x {FIVE_UNSHARED}."])


if __name__ == "__main__":
    main()
