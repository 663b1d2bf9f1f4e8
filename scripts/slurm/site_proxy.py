#!/usr/bin/env python3
"""The dev site's HTTP proxy on the login host: what a site that gives its routeless compute
nodes a way out looks like (Squid, tinyproxy). Started by start-cluster.sh at the login address,
port 3128; jobs reach it as http://login:3128 in https_proxy / http_proxy.

It forwards plain HTTP requests in absolute form (``POST http://host:port/path HTTP/1.1``) and
tunnels CONNECT (https). The "internet" of the site in a box is this machine's loopback, under
names only the proxy resolves: ``<anything>.outside.test`` (RFC 6761 reserves .test) is
127.0.0.1 here, and no node can resolve it or reach this host's loopback, so a job that reaches
such a name went through the proxy. Every other destination is refused (403), the site's own
nodes too, as a site's proxy to the outside does: no test traffic leaves this machine, and a
job that sends its own traffic to the proxy by mistake fails here as it would on a site. One
line per request goes to the log (method, destination, status), which tests read.

Standard library only; one asyncio loop.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

OUTSIDE = ".outside.test"
HEAD_LIMIT = 64 << 10  # request line and headers


def destination(host: str) -> str | None:
    """The address to connect to for ``host``, or None when this proxy does not go there."""
    host = host.lower()
    return "127.0.0.1" if host.endswith(OUTSIDE) else None


def split_target(target: str, default_port: int) -> tuple[str, int]:
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit() or "]" in port:
        return target, default_port
    return host, int(port)


class Proxy:
    def __init__(self, log: Path) -> None:
        self.log_path = log

    def log(self, method: str, target: str, status: int) -> None:
        line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {method} {target} {status}\n"
        with self.log_path.open("a", encoding="utf-8") as handle:
            handle.write(line)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._handle(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ValueError):
            pass
        finally:
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > HEAD_LIMIT:
            return
        request_line, _, rest = head.decode("latin-1").partition("\r\n")
        method, target, version = request_line.split(" ", 2)
        if method == "CONNECT":
            host, port = split_target(target, 443)
            path_and_rest = None
        else:
            if not target.startswith("http://"):
                return await self.refuse(writer, method, target, 400)
            authority, slash, path = target[len("http://"):].partition("/")
            host, port = split_target(authority, 80)
            # one request per connection upstream (Connection: close): a second request on a
            # kept-alive client connection would reach the server in absolute form
            headers = [line for line in rest.split("\r\n") if line and line.split(":", 1)[0]
                       .strip().lower() not in ("connection", "proxy-connection", "keep-alive")]
            path_and_rest = "\r\n".join([f"{method} /{path if slash else ''} {version}",
                                           *headers, "Connection: close", "", ""])
        addr = destination(host)
        if addr is None:
            return await self.refuse(writer, method, target, 403)
        try:
            up_reader, up_writer = await asyncio.open_connection(addr, port)
        except OSError:
            return await self.refuse(writer, method, target, 502)
        self.log(method, target, 200)
        if path_and_rest is None:
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        else:
            up_writer.write(path_and_rest.encode("latin-1"))
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def refuse(self, writer: asyncio.StreamWriter, method: str, target: str,
                     status: int) -> None:
        self.log(method, target, status)
        reason = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}[status]
        body = f"the dev site's proxy does not go to {target}\n".encode()
        writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Length: {len(body)}\r\n"
                     f"Connection: close\r\n\r\n".encode() + body)
        await writer.drain()


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(1 << 16):
            writer.write(chunk)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        try:
            writer.write_eof()
        except (OSError, RuntimeError):
            writer.close()


async def serve(args: argparse.Namespace) -> None:
    proxy = Proxy(args.log)
    server = await asyncio.start_server(proxy.handle, args.host, args.port, limit=HEAD_LIMIT * 2)
    if args.pid_file:
        tmp = args.pid_file.with_suffix(".tmp")
        tmp.write_text(f"{os.getpid()}\n")
        os.replace(tmp, args.pid_file)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", required=True, help="the login address")
    parser.add_argument("--port", type=int, default=3128)
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--pid-file", type=Path)
    args = parser.parse_args(argv)
    asyncio.run(serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
