"""What an interceptor is: one frozen dataclass that is both its config and its behaviour.

Its fields are its keys under ``evaluation.interceptors`` (declared with ``fields.key``, help
text included); the schema's ``InterceptorsSpec`` is made of every registered interceptor's
fields, the rendered job passes the active ones to the proxy as one JSON chain
(``[{"name": ..., "config": {...}}]``, the list form NeMo Evaluator's launcher uses), and the
proxy rebuilds the same classes from it. A chain is a value, not a global: the proxy can hold
one per route (per task) without anything here changing.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

from hpceval.errors import ConfigIssue

Body = dict[str, Any]
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
FIELD = re.compile(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")  # a JSON field path, a.b.c


@dataclasses.dataclass(frozen=True)
class Interceptor:
    """Request interceptors run on request bodies before the cache key is computed (they change
    what the model sees); response interceptors on every 2xx JSON answer, fresh or cached."""

    name: ClassVar[str]  # its name in the chain
    order: ClassVar[int]  # place of its keys in evaluation.interceptors (config show, docs)
    position: ClassVar[int]  # place in the chain (request ones first, in this order)
    stage: ClassVar[str] = "request"  # request | response | log
    changes_requests: ClassVar[bool] = True  # False: what the model sees stays as sent

    def active(self) -> bool:
        """Whether its keys ask for anything (an inactive one is left out of the chain)."""
        raise NotImplementedError

    def issues(self, where: str) -> Iterator[ConfigIssue]:
        """Its keys' problems, ``where`` the key path of evaluation.interceptors."""
        return iter(())

    def on_request(self, path: str, body: Body) -> None:
        """Change a request body in place (stage request)."""

    def on_response(self, path: str, body: Body) -> bool:
        """Change an answer in place (stage response); True when it changed it."""
        return False

    def config(self) -> dict[str, Any]:
        """Its keys and values, as the chain's JSON carries them."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def pop(body: Body, dotted: str) -> tuple[bool, Any]:
    """Remove a (dotted: nested) field; (found, value)."""
    *parents, leaf = dotted.split(".")
    node: Any = body
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict) and leaf in node:
        return True, node.pop(leaf)
    return False, None


def put(body: Body, dotted: str, value: Any) -> None:
    """Set a (dotted: nested) field, making the parents it needs."""
    *parents, leaf = dotted.split(".")
    node = body
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[leaf] = value


def field_issues(names: Iterable[tuple[str, str]]) -> Iterator[ConfigIssue]:
    """(key path, field name) pairs whose name is not a (dotted) request field name."""
    for path, name in names:
        if not FIELD.match(name):
            yield ConfigIssue(path, f"{name[:80]!r} is not a request field name",
                              "write a field name, dotted for nested fields (a.b)")
