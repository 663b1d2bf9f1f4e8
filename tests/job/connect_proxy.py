"""A site's HTTP forward proxy on loopback, for the proxy-environment tests: CONNECT tunnels
(https) and absolute-form requests (http). It resolves the made-up host names of the tests to
127.0.0.1 itself, so a client that does not go through it cannot reach those names at all."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class ConnectProxy:
    def __init__(self, hosts: dict[str, str]) -> None:
        self.hosts = hosts  # name -> address, known only to this proxy
        self.requests: list[str] = []  # each request line it was sent
        self.url = ""
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self.url

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def _resolve(self, authority: str) -> tuple[str, int]:
        host, _, port = authority.rpartition(":")
        return self.hosts.get(host, host), int(port)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            line = head.split(b"\r\n", 1)[0].decode()
            self.requests.append(line)
            method, target, _ = line.split(" ", 2)
            if method == "CONNECT":
                up_r, up_w = await asyncio.open_connection(*self._resolve(target))
                writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                await writer.drain()
            else:  # absolute form: http://host:port/path -> origin form to the upstream
                rest = target.split("://", 1)[1]
                authority, _, path = rest.partition("/")
                up_r, up_w = await asyncio.open_connection(*self._resolve(authority))
                up_w.write(head.replace(target.encode(), b"/" + path.encode(), 1))
            await asyncio.gather(_pipe(reader, up_w), _pipe(up_r, writer))
        except (OSError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    try:
        while chunk := await src.read(65536):
            dst.write(chunk)
            await dst.drain()
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.close()


@contextlib.asynccontextmanager
async def running_connect_proxy(hosts: dict[str, str]) -> AsyncIterator[ConnectProxy]:
    proxy = ConnectProxy(hosts)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()
