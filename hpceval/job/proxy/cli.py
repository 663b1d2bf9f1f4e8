"""`python -m hpceval.job proxy ...`: command-line wiring of the in-job proxy (argparse, no click:
this runs on compute nodes and should import as little as possible).

aiohttp comes in with the package (hpceval.job.proxy imports the server for the job's
pre-flight check), so it is loaded before the arguments are parsed, not after.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from hpceval.contract import RUNTIME_FILE, SERVER_LOAD_FILE, TASK_ROUTE
from hpceval.interceptors import chain_from_json, routes_from_json
from hpceval.job.proxy.config import CLIENT_KEY_ENV, ProxyConfig
from hpceval.job.proxy.liveness import parse_pids
from hpceval.job.proxy.process import run_proxy

MIB = 1 << 20
# The defaults below are ProxyConfig's, declared there once: an option left out gives the
# setting a ProxyConfig made without it has (tests/job/test_proxy_cli.py checks they agree).
DEFAULTS = ProxyConfig


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m hpceval.job proxy",
        description="OpenAI-compatible proxy in front of the model server instances of a job: "
                    "balancing, response cache on shared storage, interceptors, progress file.")
    p.add_argument("--port", type=int, required=True, help="port to listen on")
    p.add_argument("--host", default=DEFAULTS.host,
                   help=f"address to bind (default {DEFAULTS.host}: harnesses run on the same "
                        "node; 0.0.0.0 opens it to the cluster network)")
    p.add_argument("--api-key-env", metavar="NAME",
                   help="name of the environment variable holding the per-job client key (job "
                        f"scripts use {CLIENT_KEY_ENV}); requests (all but /health) must then "
                        "send 'Authorization: Bearer <token>'. The token is never taken on the "
                        "command line, where ps shows it")
    p.add_argument("--upstream-api-key-env", metavar="NAME",
                   help="name of the environment variable holding the token the upstream "
                        "servers require (job scripts: the same per-job token, given to vLLM "
                        "as VLLM_API_KEY); sent upstream as 'Authorization: Bearer <token>' "
                        "in place of the client's header")
    p.add_argument("--no-cache", action="store_true",
                   help="keep no response cache (a sweep judge's front: each element's own "
                        "judge proxy caches its answers, and one model's must not answer "
                        "another's request)")
    p.add_argument("--tls-cert", type=Path, metavar="PEM",
                   help="serve https with this certificate (with --tls-key): a sweep judge's "
                        "front, whose clients pin the certificate's SHA-256")
    p.add_argument("--tls-key", type=Path, metavar="PEM", help="the certificate's private key")
    p.add_argument("--ready-file", type=Path, metavar="PATH",
                   help="write this process's pid here once the port is bound (the job script "
                        "waits for it, not for whatever answers on the port)")
    p.add_argument("--upstream", action="append", required=True, metavar="URL",
                   help="base URL of a model server instance, e.g. http://node02:8000, or "
                        "unix:/path/to.sock for one on a Unix socket (repeat)")
    p.add_argument("--upstream-pids", action="append", default=[], metavar="PID[,PID...]",
                   help="the processes the job started for each --upstream, in the same "
                        "order: once one has exited the instance is down for good, whatever "
                        "answers on its port")
    p.add_argument("--cache-dir", type=Path, required=True,
                   help="response cache directory on shared storage")
    p.add_argument("--progress-file", type=Path, required=True, help="progress JSON to write")
    p.add_argument("--expected-requests", type=int, help="total requests expected (for ETA)")
    p.add_argument("--tasks-dir", type=Path,
                   help=f"the model's tasks directory: requests under {TASK_ROUTE}/<key>/ are "
                        f"counted for that task, in <tasks dir>/<key>/{RUNTIME_FILE}")
    p.add_argument("--log-file", type=Path,
                   help="request log path (default: proxy-requests.jsonl beside the progress file)")
    p.add_argument("--request-timeout", type=float, default=DEFAULTS.request_timeout,
                   metavar="S", help="seconds per attempt (default "
                                     f"{DEFAULTS.request_timeout:g})")
    p.add_argument("--max-retries", type=int, default=DEFAULTS.max_retries, metavar="N",
                   help="retries on connection errors, timeouts, 5xx and 429 (default "
                        f"{DEFAULTS.max_retries})")
    p.add_argument("--external-upstream", action="store_true",
                   help="the upstream is an API outside the job: re-probe it with /v1/models "
                        "(any answer below 500 means up) instead of /health")
    p.add_argument("--interceptors", default="[]", metavar="JSON",
                   help="the interceptor chain, in order: a JSON list of {\"name\": ..., "
                        "\"config\": {...}} (names and keys: evaluation.interceptors; "
                        "log_requests logs the first N request/response pairs as JSONL)")
    p.add_argument("--task-interceptors", default="{}", metavar="JSON",
                   help="tasks with a chain of their own: a JSON object {task key: chain}; "
                        "its requests under /task/<task key>/ (/task/<key>/v1/chat/completions) "
                        "and gets its chain in place of --interceptors")
    body_mb, total_mb = DEFAULTS.max_body_bytes / MIB, DEFAULTS.max_total_body_bytes / MIB
    p.add_argument("--max-body-mb", type=float, default=body_mb, metavar="MB",
                   help="largest request body, as sent and after gzip/deflate decoding "
                        f"(default {body_mb:g}); larger ones get 413")
    p.add_argument("--client-timeout", type=float, default=DEFAULTS.body_timeout, metavar="S",
                   help="seconds a client may take to send a request head, or stall while "
                        f"sending a body (default {DEFAULTS.body_timeout:g})")
    p.add_argument("--body-deadline", type=float, default=DEFAULTS.body_deadline, metavar="S",
                   help="seconds a client may take to send a whole request body, however it "
                        f"trickles (default {DEFAULTS.body_deadline:g}); then 408")
    p.add_argument("--max-total-body-mb", type=float, default=total_mb, metavar="MB",
                   help=f"request body bytes held by all requests together (default "
                        f"{total_mb:g}); a request that would exceed it gets 503")
    p.add_argument("--max-connections", type=int, default=DEFAULTS.max_connections,
                   metavar="N", help=f"open client connections (default "
                                     f"{DEFAULTS.max_connections}); one more is answered 503 "
                                     "and closed")
    p.add_argument("--max-connections-per-peer", type=int,
                   default=DEFAULTS.max_connections_per_peer, metavar="N",
                   help="open client connections from one peer: a uid when it connects over "
                        "loopback (from /proc/net/tcp), else an address (default "
                        f"{DEFAULTS.max_connections_per_peer}, 0 for no per-peer cap); one "
                        "more is answered 503 and closed")
    p.add_argument("--budget", default=DEFAULTS.budget, metavar="off|adaptive|N",
                   help="in-flight requests per upstream instance; the rest wait in the "
                        "proxy, round-robin across clients: adaptive (AIMD on errors, "
                        "timeouts and vLLM's /metrics queue), a fixed N, or off (default)")
    p.add_argument("--metrics-interval", type=float, default=DEFAULTS.metrics_interval,
                   metavar="S",
                   help="seconds between polls of each server's /metrics for the load series "
                        f"in {SERVER_LOAD_FILE} beside the progress file (default "
                        f"{DEFAULTS.metrics_interval:g}; every second while an adaptive "
                        "--budget needs them; not with --external-upstream)")
    p.add_argument("--judge-dir", type=Path, metavar="DIR",
                   help="the sweep judge's folder (auxiliary/<name>/): when the judge fails, "
                        "follow its successor job's endpoint.json and token there (this "
                        "user's own files only)")
    p.add_argument("--judge-wait", type=float, default=DEFAULTS.judge_wait, metavar="S",
                   help="with --judge-dir: seconds requests wait for a successor's record "
                        f"before they fail (default {DEFAULTS.judge_wait:g}; job scripts pass "
                        "the judge's health_timeout)")
    p.add_argument("--hold", type=float, metavar="S",
                   help="hold requests, unforwarded, until this process gets SIGUSR2 (the job "
                        "script sends it once every instance serves), at most S seconds after "
                        "the start, then 503; the harnesses start while the model loads")
    p.add_argument("--log-level", default="INFO", help="Python logging level")
    return p


def config_from_args(args: argparse.Namespace) -> ProxyConfig:
    api_key = _secret(args.api_key_env, "--api-key-env")
    upstream_api_key = _secret(args.upstream_api_key_env, "--upstream-api-key-env")
    max_body = int(args.max_body_mb * MIB)
    return ProxyConfig(
        upstreams=tuple(args.upstream), port=args.port, host=args.host,
        cache_dir=None if args.no_cache else args.cache_dir,
        progress_file=args.progress_file, tasks_dir=args.tasks_dir,
        expected_requests=args.expected_requests, request_timeout=args.request_timeout,
        max_retries=args.max_retries, interceptors=chain_from_json(args.interceptors),
        task_interceptors=tuple(routes_from_json(args.task_interceptors).items()),
        log_file=args.log_file,
        max_body_bytes=max_body, max_inflated_bytes=max_body, header_timeout=args.client_timeout,
        body_timeout=args.client_timeout, body_deadline=args.body_deadline,
        max_total_body_bytes=int(args.max_total_body_mb * MIB),
        max_connections=args.max_connections,
        max_connections_per_peer=args.max_connections_per_peer or None, api_key=api_key,
        upstream_api_key=upstream_api_key, tls=_tls(args.tls_cert, args.tls_key),
        ready_file=args.ready_file, external_upstream=args.external_upstream,
        budget=args.budget, metrics_interval=args.metrics_interval, hold=args.hold,
        judge_dir=args.judge_dir, judge_wait=args.judge_wait,
        upstream_pids=tuple(parse_pids(p) for p in args.upstream_pids))


def _tls(cert: Path | None, key: Path | None) -> tuple[Path, Path] | None:
    if (cert is None) != (key is None):
        raise SystemExit("hpceval proxy: --tls-cert and --tls-key go together")
    return None if cert is None or key is None else (cert, key)


def _secret(name: str | None, option: str) -> str | None:
    """The value of the environment variable `name` (never a command-line value: ps shows
    those to every user of the node)."""
    if name is None:
        return None
    value = os.environ.get(name, "")
    if not value.strip():
        raise ValueError(f"{option}: environment variable {name} is unset or empty")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    run_proxy(config)
    return 0
