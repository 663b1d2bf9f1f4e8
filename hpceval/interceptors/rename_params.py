"""rename_params: request fields renamed, {old: new}; first in the chain."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from hpceval.errors import ConfigIssue
from hpceval.fields import key
from hpceval.interceptors import register
from hpceval.interceptors.base import Body, Interceptor, field_issues, pop, put


@register
@dataclass(frozen=True)
class RenameParams(Interceptor):
    name = "rename_params"
    order = 4
    position = 0

    rename_params: dict[str, str] = key({}, "request fields renamed: {old: new} (dotted)")

    def active(self) -> bool:
        return bool(self.rename_params)

    def issues(self, where: str) -> Iterator[ConfigIssue]:
        return field_issues((f"{where}.rename_params.{k}", n)
                            for k, v in self.rename_params.items() for n in (k, v))

    def on_request(self, path: str, body: Body) -> None:
        for old, new in self.rename_params.items():
            found, value = pop(body, old)
            if found:
                put(body, new, value)
