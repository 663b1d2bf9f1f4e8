"""remove_params: request fields removed from every request."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from hpceval.errors import ConfigIssue
from hpceval.fields import key
from hpceval.interceptors import register
from hpceval.interceptors.base import Body, Interceptor, field_issues, pop


@register
@dataclass(frozen=True)
class RemoveParams(Interceptor):
    name = "remove_params"
    order = 3
    position = 1

    remove_params: list[str] = key([], "request fields removed from every request (dotted)")

    def active(self) -> bool:
        return bool(self.remove_params)

    def issues(self, where: str) -> Iterator[ConfigIssue]:
        return field_issues((f"{where}.remove_params", k) for k in self.remove_params)

    def on_request(self, path: str, body: Body) -> None:
        for name in self.remove_params:
            pop(body, name)
