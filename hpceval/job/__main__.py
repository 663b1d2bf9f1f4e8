"""`python -m hpceval.job COMMAND ...`: the helpers the job script runs on compute nodes.

    proxy    the in-job OpenAI-compatible proxy (hpceval.job.proxy.cli)
    collect  parse a finished harness run into the task's results (hpceval.job.collect)
    compact-cache  merge a response cache's shards after the job (hpceval.job.cache_compact)
    watch-tick  one tick of a checkpoint watch: look, claim, submit (hpceval.watch.tick)
    judge-endpoint  the sweep judge's URLs, from its trusted record (hpceval.job.judge_endpoint)
    compile-cache  a host server's compile caches from and to shared storage
                   (hpceval.job.compile_cache)

Each command is imported only when chosen: the proxy pulls in aiohttp, collect does not, and
start-up time is paid once per task on the node.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from hpceval.contract import AUX_ENDPOINT_FILE, DONE_MARKER, MANIFEST_FILE, RESULTS_FILE

USAGE = f"""usage: python -m hpceval.job COMMAND [ARGS...]

commands:
  proxy    OpenAI-compatible proxy in front of the job's model servers
  collect  turn a finished harness run into {RESULTS_FILE}, {MANIFEST_FILE} and {DONE_MARKER}
  compact-cache  merge the response cache's shard files (run after the proxy stopped)
  watch-tick     one tick of a checkpoint watch (hpceval.watch.tick)
  judge-endpoint DIR  the sweep judge's instance URLs from DIR/{AUX_ENDPOINT_FILE}, if trusted
  compile-cache seed|publish STORE CACHE  a server's compile caches from/to STORE
"""


def _proxy(argv: Sequence[str]) -> int:
    from hpceval.job.proxy.cli import main

    return main(list(argv))


def _collect(argv: Sequence[str]) -> int:
    from hpceval.job.collect import main

    return main(list(argv))


def _compact_cache(argv: Sequence[str]) -> int:
    from hpceval.job.cache_compact import main

    return main(list(argv))


def _watch_tick(argv: Sequence[str]) -> int:
    from hpceval.watch.tick import main

    return main(list(argv))


def _judge_endpoint(argv: Sequence[str]) -> int:
    from hpceval.job.judge_endpoint import main

    return main(list(argv))


def _compile_cache(argv: Sequence[str]) -> int:
    from hpceval.job.compile_cache import main

    return main(list(argv))


COMMANDS: dict[str, Callable[[Sequence[str]], int]] = {
    "proxy": _proxy, "collect": _collect, "compact-cache": _compact_cache,
    "watch-tick": _watch_tick, "judge-endpoint": _judge_endpoint,
    "compile-cache": _compile_cache}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print(USAGE, end="", file=sys.stderr)
        return 2
    if args[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0
    command = COMMANDS.get(args[0])
    if command is None:
        print(f"unknown command {args[0]!r}\n\n{USAGE}", end="", file=sys.stderr)
        return 2
    return command(args[1:])


if __name__ == "__main__":
    sys.exit(main())
