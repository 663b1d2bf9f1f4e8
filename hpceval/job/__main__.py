"""`python -m hpceval.job COMMAND ...`: the helpers the job script runs on compute nodes.

    proxy    the in-job OpenAI-compatible proxy (hpceval.job.proxy.cli)
    collect  parse a finished harness run into the task's results (hpceval.job.collect)
    aggregate  a sweep's results table, after its models' jobs (hpceval.job.aggregate)
    export   send a run's results to export.destinations (hpceval.job.export)
    compact-cache  merge a response cache's shards after the job (hpceval.job.cache_compact)
    watch-tick  one tick of a checkpoint watch: look, claim, submit (hpceval.watch.tick)
    judge-endpoint  the sweep judge's URLs, from its trusted record (hpceval.job.judge_endpoint)
    compile-cache  a host server's compile caches from and to shared storage
                   (hpceval.job.compile_cache)

Each command is imported only when chosen: the proxy pulls in aiohttp, collect does not, and
start-up time is paid once per task on the node.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence

from hpceval.contract import AUX_ENDPOINT_FILE, DONE_MARKER, MANIFEST_FILE, RESULTS_FILE

USAGE = f"""usage: python -m hpceval.job COMMAND [ARGS...]

commands:
  proxy    OpenAI-compatible proxy in front of the job's model servers
  collect  turn a finished harness run into {RESULTS_FILE}, {MANIFEST_FILE} and {DONE_MARKER}
  aggregate --run-dir DIR  a sweep's results table (results.csv) from its finished tasks
  export --run-dir DIR --dest D  send a run's results to export.destinations
  compact-cache  merge the response cache's shard files (run after the proxy stopped)
  watch-tick     one tick of a checkpoint watch (hpceval.watch.tick)
  judge-endpoint DIR  the sweep judge's instance URLs from DIR/{AUX_ENDPOINT_FILE}, if trusted
  compile-cache seed|publish STORE CACHE  a server's compile caches from/to STORE
"""


# command -> the module whose main(argv) runs it, imported only when chosen
COMMANDS: dict[str, str] = {
    "proxy": "hpceval.job.proxy.cli",
    "collect": "hpceval.job.collect",
    "aggregate": "hpceval.job.aggregate",
    "export": "hpceval.job.export",
    "compact-cache": "hpceval.job.cache_compact",
    "watch-tick": "hpceval.watch.tick",
    "judge-endpoint": "hpceval.job.judge_endpoint",
    "compile-cache": "hpceval.job.compile_cache",
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print(USAGE, end="", file=sys.stderr)
        return 2
    if args[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0
    module = COMMANDS.get(args[0])
    if module is None:
        print(f"unknown command {args[0]!r}\n\n{USAGE}", end="", file=sys.stderr)
        return 2
    run: Callable[[list[str]], int] = importlib.import_module(module).main
    return run(args[1:])


if __name__ == "__main__":
    sys.exit(main())
