"""Fixtures for the in-job proxy tests, and a tiny runner for `async def` tests (so the suite
needs no pytest-asyncio). Helpers live in proxy_fakes.py."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hpceval.job.proxy.config import ProxyConfig

TEST_TIMEOUT_S = 30


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    args = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    asyncio.run(asyncio.wait_for(pyfuncitem.obj(**args), TEST_TIMEOUT_S))
    return True


@pytest.fixture
def make_config(tmp_path: Path) -> Callable[..., ProxyConfig]:
    """A test ProxyConfig: fast backoff, probes and progress writes; cache and progress in tmp."""
    def make(upstreams: list[str], **overrides: Any) -> ProxyConfig:
        settings: dict[str, Any] = {
            "cache_dir": tmp_path / "cache", "progress_file": tmp_path / "progress.json",
            "retry_backoff": 0.01, "retry_backoff_max": 0.05, "probe_interval": 0.05,
            "progress_interval": 0.05, "request_timeout": 5.0, "shutdown_grace": 1.0}
        settings.update(overrides)
        return ProxyConfig(upstreams=tuple(upstreams), **settings)
    return make
