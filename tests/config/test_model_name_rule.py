"""The model-name rule is two properties of the spec (served_name: the name a server answers
to; request_model: the name requests carry), written nowhere else. What the two properties
answer is checked in tests/cli/test_errors.py."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
# `model_id or ...served_model_name` or the other way round, a line break allowed between
_BY_HAND = re.compile(r"\b(model_id\s+or\s+[\w.()\[\]\"']*served_model_name"
                      r"|served_model_name\s+or\s+[\w.()\[\]\"']*model_id)\b")


def test_the_rule_is_written_only_on_the_spec() -> None:
    offenders = [f"{path.relative_to(ROOT)}: {m.group(0)!r}"
                 for path in (ROOT / "hpceval").rglob("*.py")
                 if path.name != "schema.py"
                 for m in _BY_HAND.finditer(path.read_text(encoding="utf-8"))]
    assert offenders == []


def test_the_pattern_catches_both_orders_across_lines() -> None:
    assert _BY_HAND.search("x = spec.target.api_endpoint.model_id\n    or dep.served_model_name")
    assert _BY_HAND.search('name = aux.served_model_name or aux["model_id"]')
    assert not _BY_HAND.search("name = spec.request_model or ''")
