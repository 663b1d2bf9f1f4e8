"""log_requests: the first N request/response pairs, logged by the proxy to the model's folder."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hpceval.fields import key
from hpceval.interceptors import register
from hpceval.interceptors.base import Interceptor


@register
@dataclass(frozen=True)
class LogRequests(Interceptor):
    name = "log_requests"
    order = 5
    position = 5
    stage: ClassVar[str] = "log"  # the proxy's RequestLog records the pairs
    changes_requests: ClassVar[bool] = False

    log_requests: int = key(0, "log the first N request/response pairs to the model's folder",
                            minimum=0)

    def active(self) -> bool:
        return self.log_requests > 0
