"""An external endpoint's URL, split for the in-job proxy in front of it (the model's
target.api_endpoint.url, an external judge's url)."""

from __future__ import annotations

from urllib.parse import urlsplit


def base_of(url: str | None) -> str | None:
    if url is None:
        return None
    for suffix in ("/chat/completions", "/completions", "/embeddings"):
        if url.rstrip("/").endswith(suffix):
            return url.rstrip("/")[: -len(suffix)]
    return url.rstrip("/")


def proxied(url: str | None) -> dict[str, str | None]:
    """The origin the proxy forwards to, and the paths the harness asks the proxy for (the
    same paths, so a URL prefix such as /api/v1 carries over)."""
    if url is None:
        return {"origin": None, "url_path": None, "base_path": None}
    parts = urlsplit(url)
    base = base_of(url) or url
    return {"origin": f"{parts.scheme}://{parts.netloc}", "url_path": parts.path or "/",
            "base_path": urlsplit(base).path}
