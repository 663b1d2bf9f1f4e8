"""The one YAML reader for run files, profiles, presets and ``-o`` values.

PyYAML implements YAML 1.1, which reads ``1:00:00`` as the base-60 integer 3600 (a walltime
that Slurm then takes as 3600 minutes), ``1e-5`` as a string and ``2026-01-01`` as a date.
This reader follows what NeMo Evaluator's loader (OmegaConf) and YAML 1.2 mean instead:
no base-60 numbers, exponent floats without a dot, no timestamps. It also refuses duplicate
keys (the later one would silently win), bytes that are not UTF-8, and documents that are
too large or expand too far through aliases (a few hundred bytes of nested aliases name
billions of values).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError

from hpceval.errors import HpcevalError

TOO_LARGE_FIX = "a configuration file is a few KiB: check that the path names the file you meant"
MAX_BYTES = 1 << 20  # run files are a few KiB; NeMo Evaluator's largest example is 14 KiB
MAX_VALUES = 100_000  # values after alias expansion; a large sweep has a few thousand

_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"

# YAML 1.1's int and float patterns without their base-60 forms, floats as in YAML 1.2.
_INT_RE = re.compile(r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)"
                     r"|[-+]?0x[0-9a-fA-F_]+)$")
_FLOAT_RE = re.compile(r"^(?:[-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?"
                       r"|[-+]?[0-9][0-9_]*[eE][-+]?[0-9]+"
                       r"|[-+]?\.[0-9_]+(?:[eE][-+]?[0-9]+)?"
                       r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$")


class YamlError(HpcevalError):
    """A document this reader refuses; ``line`` is 1-based where known."""

    def __init__(self, problem: str, line: int | None = None,
                 fix: str = "fix the YAML (indentation, quotes, colons, repeated keys)") -> None:
        super().__init__(problem, fix)
        self.problem = problem
        self.line = line


_Base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_Base):  # type: ignore[misc]
    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: dict[tuple[str, str], int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                continue
            ident = (key_node.tag, key_node.value)
            if ident in seen:
                raise ConstructorError(
                    None, None, f"duplicate key {key_node.value!r} (first written on line "
                    f"{seen[ident]}); the later value would silently win", key_node.start_mark)
            seen[ident] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep)


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in (_INT, _FLOAT, _TIMESTAMP)]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(_INT, _INT_RE, list("-+0123456789"))
_Loader.add_implicit_resolver(_FLOAT, _FLOAT_RE, list("-+0123456789."))


def _check_size(data: Any) -> None:
    """Count values as a reader would see them (aliases expanded); stop at the bound."""
    budget = MAX_VALUES
    stack = [data]
    while stack:
        node = stack.pop()
        budget -= 1
        if budget < 0:
            raise YamlError(f"expands to more than {MAX_VALUES} values (nested YAML aliases?)",
                            fix="write the values out instead of nesting aliases")
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def loads(text: str) -> Any:
    """Parse one document; raise YamlError with the line of the problem."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise YamlError(f"is larger than {MAX_BYTES // 1024} KiB", fix=TOO_LARGE_FIX)
    try:
        data = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise YamlError(str(problem), mark.line + 1 if mark is not None else None) from exc
    except RecursionError as exc:  # deeply nested flow collections
        raise YamlError("is nested too deeply", fix="flatten the nesting") from exc
    _check_size(data)
    return data


def read(path: Path) -> Any:
    """Read and parse a file; OSError is left to the caller (it names the path its own way)."""
    with path.open("rb") as f:
        return parse_bytes(f.read(MAX_BYTES + 1))


def parse_bytes(raw: bytes) -> Any:
    """Parse a file's bytes, read up to MAX_BYTES + 1 (one more tells a file too large)."""
    if len(raw) > MAX_BYTES:
        raise YamlError(f"is larger than {MAX_BYTES // 1024} KiB", fix=TOO_LARGE_FIX)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise YamlError(f"is not UTF-8 text (byte 0x{raw[exc.start]:02x})", line,
                        fix="save it as UTF-8 text") from exc
    return loads(text)


# libyaml's emitter when PyYAML has it. PyYAML's representer stays Python: it was 70 % of a
# sweep's submit (two dumps of ~260 values per model), so `dumps` also reuses the text of a
# value that an earlier document had (a sweep's models differ in a few keys).
_Dumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_SIMPLE_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
_MEMO_MAX = 20_000
_memo: dict[str, str] = {}


def _dump(data: Any) -> str:
    text: str = yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=False)
    return text


def _splittable(value: Any) -> bool:
    return (isinstance(value, dict) and bool(value)
            and all(isinstance(k, str) and _SIMPLE_KEY.match(k) for k in value))


def nested(key: str, block: str) -> str:
    """The entry `key:` holding `block` (a block mapping's text, as `dumps` writes it). A
    block mapping is the concatenation of its entries, and a nested block is the same text
    one indentation level deeper, so the pieces join into what one dump would write."""
    return f"{key}:\n" + "".join(f"  {line}\n" if line else "\n" for line in block.splitlines())


def _entry(key: str, value: Any) -> str:
    if _splittable(value):
        return nested(key, "".join(_entry(k, v) for k, v in value.items()))
    memo_key = repr((key, value))  # repr tells 1, True and "1" apart; values are plain data
    text = _memo.get(memo_key)
    if text is None:
        if len(_memo) >= _MEMO_MAX:
            _memo.clear()
        text = _memo[memo_key] = _dump({key: value})
    return text


def dumps(data: Any) -> str:
    """The one YAML writer for what hpceval writes itself (run.yaml): keys in their order."""
    if _splittable(data):
        return "".join(_entry(k, v) for k, v in data.items())
    return _dump(data)


def simple_key(key: str) -> bool:
    """Whether `nested` may write `key` as it is (no quoting or escaping needed)."""
    return bool(_SIMPLE_KEY.match(key))
