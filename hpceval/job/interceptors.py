"""Per-run request/response interceptors of the proxy: small functions over the JSON body.

Request interceptors run, in this order, on the bodies of the OpenAI endpoints the proxy
understands (chat, completions, embeddings) *before* the cache key is computed, because they
change what the model sees: rename params -> remove params -> add params -> system prompt.
Response interceptors run on every 2xx JSON answer, fresh or from the cache (the cache stores
what the server said, so changing them between runs needs no new generations).
Streamed requests get the request interceptors only; their answers pass through untouched.

Parameter names may be dotted to reach nested fields: `chat_template_kwargs.enable_thinking`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from hpceval.job.proxy_config import ProxyConfig

log = logging.getLogger(__name__)

Body = dict[str, Any]
RequestInterceptor = Callable[[str, Body], None]
ResponseInterceptor = Callable[[str, Body], bool]  # True when it changed the body

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


def _pop(body: Body, dotted: str) -> tuple[bool, Any]:
    *parents, leaf = dotted.split(".")
    node: Any = body
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict) and leaf in node:
        return True, node.pop(leaf)
    return False, None


def _set(body: Body, dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = body
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[leaf] = value


def rename_params(pairs: tuple[tuple[str, str], ...]) -> RequestInterceptor:
    def rename(_path: str, body: Body) -> None:
        for old, new in pairs:
            found, value = _pop(body, old)
            if found:
                _set(body, new, value)
    return rename


def remove_params(keys: tuple[str, ...]) -> RequestInterceptor:
    def remove(_path: str, body: Body) -> None:
        for key in keys:
            _pop(body, key)
    return remove


def add_params(pairs: tuple[tuple[str, Any], ...]) -> RequestInterceptor:
    """Set parameters, overriding what the harness sent (that is the point of forcing them)."""
    def add(_path: str, body: Body) -> None:
        for key, value in pairs:
            # A fresh copy per request: a shared list/dict would be mutated by later interceptors.
            _set(body, key, json.loads(json.dumps(value)) if isinstance(value, (list, dict))
                 else value)
    return add


def system_prompt(text: str) -> RequestInterceptor:
    """Chat only: replace the content of a leading system message, or insert one."""
    def inject(path: str, body: Body) -> None:
        messages = body.get("messages")
        if path != CHAT or not isinstance(messages, list):
            return
        if messages and isinstance(messages[0], dict) and messages[0].get("role") == "system":
            messages[0] = {**messages[0], "content": text}
        else:
            messages.insert(0, {"role": "system", "content": text})
    return inject


def split_reasoning(text: str, start: str, end: str) -> tuple[str | None, str]:
    """(reasoning, answer). Without the end marker, a started trace is unfinished: no answer."""
    cut = text.find(end)
    if cut < 0:
        begin = text.find(start) if start else -1
        if begin < 0:
            return None, text
        return text[begin + len(start):].strip(), text[:begin].strip()
    reasoning = text[:cut]
    begin = reasoning.find(start) if start else -1
    if begin >= 0:
        reasoning = reasoning[begin + len(start):]
    return reasoning.strip(), text[cut + len(end):].strip()


def strip_reasoning(start: str, end: str) -> ResponseInterceptor:
    """Move `<think>...</think>` out of chat `content` / completion `text` into
    `reasoning_content`, so graders see only the answer and the trace is still kept."""
    def strip(path: str, body: Body) -> bool:
        changed = False
        for choice in body.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            holder, field = (choice.get("message"), "content") if path == CHAT else (choice, "text")
            if not isinstance(holder, dict) or not isinstance(holder.get(field), str):
                continue
            reasoning, answer = split_reasoning(holder[field], start, end)
            if reasoning is None:
                continue
            before = holder.get("reasoning_content")
            holder["reasoning_content"] = f"{before}\n{reasoning}" if before else reasoning
            holder[field] = answer
            changed = True
        return changed
    return strip


@dataclass(frozen=True)
class Interceptors:
    request: tuple[RequestInterceptor, ...] = ()
    response: tuple[ResponseInterceptor, ...] = ()

    def on_request(self, path: str, body: Body) -> None:
        for interceptor in self.request:
            interceptor(path, body)

    def on_response(self, path: str, body: Body) -> bool:
        changed = False
        for interceptor in self.response:
            changed = interceptor(path, body) or changed
        return changed


def build_interceptors(config: ProxyConfig) -> Interceptors:
    request: list[RequestInterceptor] = []
    if config.rename_params:
        request.append(rename_params(config.rename_params))
    if config.remove_params:
        request.append(remove_params(config.remove_params))
    if config.add_params:
        request.append(add_params(config.add_params))
    if config.system_prompt is not None:
        request.append(system_prompt(config.system_prompt))
    response: list[ResponseInterceptor] = []
    if config.strip_reasoning:
        response.append(strip_reasoning(config.reasoning_start, config.reasoning_end))
    return Interceptors(tuple(request), tuple(response))


class RequestLog:
    """The first `limit` request/response pairs as JSONL (headers, hence API keys, never logged)."""

    def __init__(self, path: Path | None, limit: int) -> None:
        self.path = path
        self.remaining = limit if path is not None else 0
        self._file: IO[str] | None = None

    def record(self, path: str, request: Body | None, status: int, response: bytes,
               cached: bool, seconds: float) -> None:
        if self.remaining <= 0:
            return
        self.remaining -= 1
        try:
            answer: Any = json.loads(response)
        except ValueError:
            answer = response.decode("utf-8", "replace")
        entry = {"t": round(time.time(), 3), "path": path, "status": status, "cached": cached,
                 "ms": round(seconds * 1000, 1), "request": request, "response": answer}
        try:
            if self._file is None and self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = self.path.open("a", encoding="utf-8")
            if self._file is not None:
                self._file.write(json.dumps(entry, ensure_ascii=False) + "\n")
                self._file.flush()
        except OSError as exc:
            log.warning("request log disabled: %s", exc)
            self.remaining = 0
        if self.remaining <= 0:
            self.close()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
