"""add_params: request fields set on every request, over what the harness sent."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from hpceval.errors import ConfigIssue
from hpceval.fields import key
from hpceval.interceptors import register
from hpceval.interceptors.base import Body, Interceptor, field_issues, put


@register
@dataclass(frozen=True)
class AddParams(Interceptor):
    name = "add_params"
    order = 2
    position = 2

    add_params: dict[str, Any] = key(
        {}, "request fields set on every request; dotted keys reach nested fields"
    )

    def active(self) -> bool:
        return bool(self.add_params)

    def issues(self, where: str) -> Iterator[ConfigIssue]:
        return field_issues((f"{where}.add_params.{k}", k) for k in self.add_params)

    def on_request(self, path: str, body: Body) -> None:
        for name, value in self.add_params.items():
            # A fresh copy per request: a shared list/dict would be mutated by later interceptors.
            put(body, name, json.loads(json.dumps(value)) if isinstance(value, (list, dict))
                else value)
