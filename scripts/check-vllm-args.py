#!/usr/bin/env python3
"""Check every `vllm serve` command line in rendered job scripts with vLLM's own parser.

    VLLM_TARGET_DEVICE=cpu /tmp/venv-vllm/bin/python scripts/check-vllm-args.py \
        tests/golden/*.sbatch
    VLLM_TARGET_DEVICE=cpu python scripts/check-vllm-args.py --json argv-lists.json

Each command line goes through the parser `vllm serve` builds (make_arg_parser on a `serve`
sub-parser) and then validate_parsed_serve_args, the same checks `vllm serve` runs before it
loads anything, so a misspelt flag, a bad value or a flag combination vLLM refuses fails here
instead of after a job waited in the queue. No GPU is needed: VLLM_TARGET_DEVICE=cpu lets vLLM
build its parser without one. The templates target the vLLM version pinned in
hpceval/engines/vllm.py (VLLM_VERSION); a different installed version is reported, not refused.

Shell variables the job fills in at run time ("$PORT", "${NODES[0]}", ...) are replaced by
plausible values first. Exit status: 0 all lines parse, 1 some do not, 2 usage or setup error.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import os
import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

# The version the templates target, read from the one place that names it (this script runs in
# the vLLM venv, where hpceval itself is not installed).
PINNED = re.search(r'^VLLM_VERSION = "(.+)"$', (Path(__file__).resolve().parents[1] / "hpceval"
                   / "engines" / "vllm.py").read_text(), re.M).group(1)  # type: ignore[union-attr]
_RUNTIME_VALUES = {"PORT": "8000", "COORD_PORT": "8032", "HEAD_NODE": "node1"}
_VAR = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)(\[[0-9]+\])?\}?")


def _logical_lines(text: str) -> list[str]:
    """Join backslash-continued lines, as bash reads them."""
    out: list[str] = []
    buf = ""
    for line in text.splitlines():
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        out.append(buf + line)
        buf = ""
    if buf:
        out.append(buf)
    return out


def _fill(word: str) -> str:
    return _VAR.sub(lambda m: "node1" if m.group(1) == "NODES"
                    else _RUNTIME_VALUES.get(m.group(1), "x"), word)


def serve_argvs(script: str) -> list[list[str]]:
    """The arguments after `vllm serve` of every command line in a rendered script."""
    found: list[list[str]] = []
    for line in _logical_lines(script):
        if line.lstrip().startswith("#") or "vllm" not in line:
            continue
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        for i in range(len(words) - 1):
            if words[i] == "vllm" and words[i + 1] == "serve":
                found.append([_fill(w) for w in words[i + 2:]])
                break
    return found


def make_checker() -> Callable[[list[str]], str | None]:
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    import vllm  # type: ignore[import-not-found]

    # `vllm serve`'s own module names the parser builder and the validation it runs; they move
    # between releases (entrypoints.common in 0.33, entrypoints.launchers in 0.32), so take them
    # from there rather than from a fixed path.
    serve = importlib.import_module("vllm.entrypoints.cli.serve")
    make_arg_parser = serve.make_arg_parser
    validate_parsed_serve_args = serve.validate_parsed_serve_args
    FlexibleArgumentParser = serve.FlexibleArgumentParser

    if vllm.__version__ != PINNED:
        print(f"note: vLLM {vllm.__version__} installed; the templates target {PINNED}")
    top = FlexibleArgumentParser(prog="vllm")
    make_arg_parser(top.add_subparsers(dest="subcommand").add_parser("serve"))

    def check(argv: list[str]) -> str | None:
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                ns = top.parse_args(["serve", *argv])
                validate_parsed_serve_args(ns)
        except SystemExit:
            lines = err.getvalue().strip().splitlines()
            return lines[-1] if lines else "rejected"
        except Exception as exc:  # validation raises TypeError/ValueError with the reason
            return f"{type(exc).__name__}: {exc}"
        return None

    return check


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", type=Path, help="rendered job scripts")
    ap.add_argument("--json", type=Path, help="a JSON list of argv lists (after `vllm serve`)")
    args = ap.parse_args()
    commands: list[tuple[str, list[str]]] = []
    for path in args.paths:
        for n, argv in enumerate(serve_argvs(path.read_text()), start=1):
            commands.append((f"{path.name}#{n}", argv))
    if args.json:
        for n, argv in enumerate(json.loads(args.json.read_text()), start=1):
            argv = argv[2:] if argv[:2] == ["vllm", "serve"] else argv
            commands.append((f"{args.json.name}#{n}", [str(a) for a in argv]))
    if not commands:
        print("no `vllm serve` command lines found", file=sys.stderr)
        return 2
    check = make_checker()
    failures = 0
    for label, argv in commands:
        problem = check(argv)
        status = "ok  " if problem is None else "FAIL"
        print(f"{status} {label}: vllm serve {shlex.join(argv)}")
        if problem is not None:
            failures += 1
            print(f"     {problem}")
    print(f"{len(commands) - failures} of {len(commands)} command lines accepted by vLLM's parser")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
