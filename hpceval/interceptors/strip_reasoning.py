"""strip_reasoning: move ``<think>...</think>`` out of answers before scoring (NEL: reasoning)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

from hpceval.errors import ConfigIssue
from hpceval.fields import key
from hpceval.interceptors import register
from hpceval.interceptors.base import CHAT, Body, Interceptor


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


@register
@dataclass(frozen=True)
class StripReasoning(Interceptor):
    """Chat ``content`` / completion ``text`` keep only the answer; the trace goes to
    ``reasoning_content``, so graders see the answer and the trace is still kept."""

    name = "strip_reasoning"
    order = 1
    position = 4
    stage: ClassVar[str] = "response"
    changes_requests: ClassVar[bool] = False  # it changes answers, after the cache

    strip_reasoning: bool = key(
        False, "move <think>...</think> out of answers before scoring (NEL: reasoning)"
    )
    reasoning_start: str = key("<think>", "marker where a reasoning trace starts")
    reasoning_end: str = key("</think>", "marker where a reasoning trace ends")

    def active(self) -> bool:
        return self.strip_reasoning

    def issues(self, where: str) -> Iterator[ConfigIssue]:
        if self.strip_reasoning and not self.reasoning_end:
            yield ConfigIssue(f"{where}.reasoning_end", "must not be empty",
                              "give the marker that ends a reasoning trace, e.g. </think>")

    def on_response(self, path: str, body: Body) -> bool:
        changed = False
        for choice in body.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            holder, field = (choice.get("message"), "content") if path == CHAT else (choice, "text")
            if not isinstance(holder, dict) or not isinstance(holder.get(field), str):
                continue
            reasoning, answer = split_reasoning(holder[field], self.reasoning_start,
                                                self.reasoning_end)
            if reasoning is None:
                continue
            before = holder.get("reasoning_content")
            holder["reasoning_content"] = f"{before}\n{reasoning}" if before else reasoning
            holder[field] = answer
            changed = True
        return changed
