"""Sites whose compute nodes reach the internet only through an HTTP proxy (issue 21, defect 3):
the in-job proxy reaches an external API through https_proxy (a CONNECT tunnel) and http_proxy,
honours NO_PROXY, and never sends the job's own servers through a site proxy. The site proxy
is a real one on loopback (connect_proxy.py); the external API's name is known only to it."""

from __future__ import annotations

import ssl
import subprocess
from collections.abc import Callable
from pathlib import Path

import aiohttp
import aiohttp.connector
import pytest
from connect_proxy import running_connect_proxy
from proxy_fakes import FakeUpstream, chat, running_proxy

from hpceval.job.proxy.config import ProxyConfig

MakeConfig = Callable[..., ProxyConfig]
API_HOST = "api.hpceval.test"  # resolvable by nobody but the site proxy
PROXY_VARS = ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "no_proxy", "NO_PROXY",
              "all_proxy", "ALL_PROXY")


@pytest.fixture(autouse=True)
def clean_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)


def tls_for(host: str, tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A self-signed certificate for ``host``: (the server's context, a client context that
    trusts it)."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", f"/CN={host}", "-addext", f"subjectAltName=DNS:{host}",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    return server, ssl.create_default_context(cafile=str(cert))


async def ask(base: str) -> int:
    async with aiohttp.ClientSession() as s, s.post(base + "/v1/chat/completions",
                                                    json=chat("q")) as r:
        return r.status


async def test_external_https_api_is_reached_through_https_proxy_connect(
        make_config: MakeConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server_tls, client_tls = tls_for(API_HOST, tmp_path)
    # the certificate is trusted the way a site's CA bundle would be
    monkeypatch.setattr(aiohttp.connector, "_SSL_CONTEXT_VERIFIED", client_tls)
    api = FakeUpstream()
    url = await api.start(server_tls, host=API_HOST)
    try:
        async with running_connect_proxy({API_HOST: "127.0.0.1"}) as site_proxy:
            monkeypatch.setenv("https_proxy", site_proxy.url)
            monkeypatch.setenv("no_proxy", "127.0.0.1,localhost,node1")  # as the job sets it
            config = make_config([url], external_upstream=True, max_retries=0, cache_dir=None)
            async with running_proxy(config) as (_, base):
                status = await ask(base)
    finally:
        await api.stop()
    assert status == 200 and api.hits == 1
    assert f"CONNECT {API_HOST}:{url.rsplit(':', 1)[1]} HTTP/1.1" in site_proxy.requests


async def test_external_http_api_goes_through_http_proxy(
        make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    api = FakeUpstream()
    url = await api.start(host=API_HOST)
    try:
        async with running_connect_proxy({API_HOST: "127.0.0.1"}) as site_proxy:
            monkeypatch.setenv("http_proxy", site_proxy.url)
            config = make_config([url], external_upstream=True, max_retries=0, cache_dir=None)
            async with running_proxy(config) as (_, base):
                status = await ask(base)
    finally:
        await api.stop()
    assert status == 200 and api.hits == 1
    assert any(line.startswith(f"POST {url}/v1/chat/completions") for line in site_proxy.requests)


async def test_no_proxy_names_are_reached_directly(
        make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    api = FakeUpstream()
    url = await api.start()  # http://127.0.0.1:PORT, listed in NO_PROXY as the job fills it
    try:
        async with running_connect_proxy({}) as site_proxy:
            monkeypatch.setenv("http_proxy", site_proxy.url)
            monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost,node1,node2")
            config = make_config([url], external_upstream=True, max_retries=0, cache_dir=None)
            async with running_proxy(config) as (_, base):
                status = await ask(base)
    finally:
        await api.stop()
    assert status == 200 and api.hits == 1 and site_proxy.requests == []


async def test_job_servers_never_go_through_a_site_proxy(
        make_config: MakeConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    server = FakeUpstream()
    url = await server.start()
    try:
        async with running_connect_proxy({}) as site_proxy:
            monkeypatch.setenv("http_proxy", site_proxy.url)  # and no NO_PROXY at all
            config = make_config([url], max_retries=0, cache_dir=None)
            async with running_proxy(config) as (_, base):
                status = await ask(base)
    finally:
        await server.stop()
    assert status == 200 and server.hits == 1 and site_proxy.requests == []
