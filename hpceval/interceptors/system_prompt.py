"""system_prompt: a system message first in every chat request (NEL: system_message)."""

from __future__ import annotations

from dataclasses import dataclass

from hpceval.fields import key
from hpceval.interceptors import register
from hpceval.interceptors.base import CHAT, Body, Interceptor


@register
@dataclass(frozen=True)
class SystemPrompt(Interceptor):
    name = "system_prompt"
    order = 0
    position = 3  # last of the request interceptors: the prompt is final

    system_prompt: str | None = key(
        None, "system message placed first in every chat request (NEL: system_message)"
    )

    def active(self) -> bool:
        return self.system_prompt is not None

    def on_request(self, path: str, body: Body) -> None:
        """Chat only: replace the content of a leading system message, or insert one."""
        messages = body.get("messages")
        if path != CHAT or not isinstance(messages, list):
            return
        if messages and isinstance(messages[0], dict) and messages[0].get("role") == "system":
            messages[0] = {**messages[0], "content": self.system_prompt}
        else:
            messages.insert(0, {"role": "system", "content": self.system_prompt})
