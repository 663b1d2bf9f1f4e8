"""shared-cluster-4 N1: a sweep's judge is reached over https with a pinned certificate.

The review's attack: the judge's vLLM crashed, another uid bound its port, received all 40
judge requests with the judge's token, and its "yes" verdicts gave a model judge_acc 1.0. Now the
judge job serves through an hpceval proxy with TLS on a key pair of its own, endpoint.json
carries the certificate's SHA-256, and an element's judge proxy pins it: here a squatter takes
the judge's port with a certificate of its own and gets nothing, neither a request nor the
token, on the cheap client's path, the streamed path (aiohttp) or a health probe."""

from __future__ import annotations

import hashlib
import json
import ssl
import subprocess
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest
from proxy_fakes import FakeUpstream, chat, running_proxy, running_upstreams

from hpceval.contract import AUX_ENDPOINT_FILE, AUX_TOKEN_FILE
from hpceval.job.judge_endpoint import EndpointUntrusted, read_endpoint
from hpceval.job.proxy.config import ProxyConfig

MakeConfig = Callable[..., ProxyConfig]
TOKEN = "judge-token-0123456789"


def certificate(folder: Path, name: str) -> tuple[Path, Path, str]:
    """A self-signed certificate made as the judge job makes its own: (cert, key, sha256)."""
    folder.mkdir(parents=True, exist_ok=True)
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj",
                    "/CN=hpceval-judge", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    der = ssl.PEM_cert_to_DER_cert(cert.read_text())
    return cert, key, hashlib.sha256(der).hexdigest()


def serving(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(cert), str(key))
    return context


def publish(folder: Path, url: str, pin: str | None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / AUX_TOKEN_FILE).write_text(TOKEN + "\n")
    (folder / AUX_TOKEN_FILE).chmod(0o600)
    record = {"urls": [url], "model_id": "j", "job_id": "1"}
    if pin is not None:
        record["tls_sha256"] = pin
    (folder / AUX_ENDPOINT_FILE).write_text(json.dumps(record))
    (folder / AUX_ENDPOINT_FILE).chmod(0o644)


async def ask(base: str, stream: bool = False) -> int:
    async with aiohttp.ClientSession() as s, \
            s.post(base + "/v1/chat/completions", json=chat("is it right?", stream=stream)
                   ) as r:
        await r.read()
        return r.status


async def test_a_squatter_on_the_judges_port_gets_no_request_and_no_token(
        make_config: MakeConfig, tmp_path: Path) -> None:
    cert, key, pin = certificate(tmp_path / "judge", "judge")
    other_cert, other_key, _ = certificate(tmp_path / "squatter", "squatter")
    judge, squatter = FakeUpstream(), FakeUpstream()
    folder = tmp_path / "auxiliary" / "judge"
    url = await judge.start(serving(cert, key))
    try:
        publish(folder, url, pin)
        config = make_config([url], upstream_api_key=TOKEN, judge_dir=folder, judge_wait=1,
                             max_retries=1)
        async with running_proxy(config) as (server, base):
            assert server.balancer.instances[0].pin == bytes.fromhex(pin)
            assert await ask(base) == 200
            assert await ask(base, stream=True) == 200
            assert judge.headers[0]["Authorization"] == f"Bearer {TOKEN}"
            # the judge dies; another uid binds its port at once, with its own certificate
            port = int(url.rsplit(":", 1)[1])
            await judge.stop()
            await squatter.start(serving(other_cert, other_key), port=port)
            for stream in (False, True, False):
                assert await ask(base, stream=stream) in (502, 503)
            assert await server.balancer.probe(server.balancer.instances[0],
                                               server._sessions) is False  # type: ignore[arg-type]
    finally:
        await judge.stop()
        await squatter.stop()
    # nothing reached it: not one request, so not the token either
    assert squatter.hits == 0 and squatter.headers == []
    assert [p for p in squatter.paths] == []


async def test_without_a_pin_an_https_judge_is_not_trusted(make_config: MakeConfig,
                                                           tmp_path: Path) -> None:
    cert, key, _ = certificate(tmp_path / "judge", "judge")
    folder = tmp_path / "auxiliary" / "judge"
    judge = FakeUpstream()
    url = await judge.start(serving(cert, key))
    try:
        publish(folder, url, None)
        with pytest.raises(EndpointUntrusted, match="without tls_sha256"):
            read_endpoint(folder)
        publish(folder, url, "XYZ")
        with pytest.raises(EndpointUntrusted, match="not 64 hex digits"):
            read_endpoint(folder)
        # a proxy given the https URL with no trusted record checks certificate authorities,
        # which signed nothing of the judge's: it connects to nothing
        config = make_config([url], upstream_api_key=TOKEN, max_retries=1)
        async with running_proxy(config) as (_, base):
            assert await ask(base) in (502, 503)
        assert judge.hits == 0
    finally:
        await judge.stop()


async def test_the_judges_front_serves_https_and_an_element_proxy_reaches_it_pinned(
        make_config: MakeConfig, tmp_path: Path) -> None:
    """The judge job's front (the proxy with --tls-cert/--tls-key) in front of a plain judge
    server, and an element's judge proxy pinning the front's certificate: end to end."""
    cert, key, pin = certificate(tmp_path / "tls", "front")
    upstream = FakeUpstream()
    folder = tmp_path / "auxiliary" / "judge"
    async with running_upstreams(upstream) as (judge_url,):
        front_config = make_config([judge_url], api_key=TOKEN, upstream_api_key=TOKEN,
                                   tls=(cert, key), cache_dir=None,
                                   progress_file=tmp_path / "front-progress.json")
        async with running_proxy(front_config) as (front, _):
            front_url = f"https://127.0.0.1:{front.port}"
            publish(folder, front_url, pin)
            element = make_config([front_url], upstream_api_key=TOKEN, judge_dir=folder,
                                  judge_wait=1, max_retries=1,
                                  cache_dir=tmp_path / "element-cache")
            async with running_proxy(element) as (_, base):
                assert await ask(base) == 200
                assert await ask(base, stream=True) == 200
            # the front wants the key: a client without it is refused
            async with aiohttp.ClientSession() as s, \
                    s.get(front_url + "/v1/models", ssl=False) as r:
                assert r.status == 401
    assert upstream.hits == 2 and upstream.headers[0]["Authorization"] == f"Bearer {TOKEN}"
