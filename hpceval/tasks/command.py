"""Harness commands: the catalogue's command template for a task, made safe for a job script.

A catalogue command template quotes every value with ``q``. Some values are only known inside
the job (the endpoint's host and port depend on the nodes and the job id; the output directory
on the run; an auxiliary deployment's URL, see config/auxiliary.py): the template sees
placeholder tokens for them (``runtime_token(VAR)``), and each token is then replaced by a
reference to the environment variable VAR, written correctly for the quoting context it sits in
(inside '...', inside "...", or bare). The replacement is fixed text, so whatever a value holds
it stays data. Placeholders contain NUL, which no value can (bash cannot hold it either).
"""

from __future__ import annotations

import re
import shlex
from functools import lru_cache
from typing import Any

import jinja2

from hpceval.errors import HpcevalError
from hpceval.resources import lm_eval_tasks_dir
from hpceval.tasks.definitions import HarnessDef, TaskDef

# template variable -> environment variable set by the job script before the harness runs
RUNTIME_VALUES = {
    "base_url": "HPCEVAL_BASE_URL",
    "endpoint_url": "HPCEVAL_ENDPOINT_URL",
    "output_dir": "HPCEVAL_OUTPUT_DIR",
}
_TOKEN = "\x00hpceval:{}\x00"
_SPECIAL = re.compile("[\x00'\"\\\\]")
_TOKEN_AT = re.compile("\x00hpceval:([A-Z_][A-Z0-9_]*)\x00")


def runtime_token(variable: str) -> str:
    """The placeholder for "${VARIABLE}" in a value the command template quotes."""
    if not re.fullmatch(r"[A-Z_][A-Z0-9_]*", variable):
        raise ValueError(f"{variable!r} is not a job-script variable name")
    return _TOKEN.format(variable)


def _q(value: Any) -> str:
    if value is None:
        raise ValueError("a None value reached a harness command; test it with `is not none`")
    return shlex.quote(str(value))


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False,
                             keep_trailing_newline=False)
    env.filters["q"] = _q
    return env


@lru_cache(maxsize=256)
def _compiled(command: str) -> jinja2.Template:
    # Many tasks share one harness template; compiling it once per job keeps rendering fast.
    return _environment().from_string(command)


class CommandError(HpcevalError, ValueError):
    """A catalogue command template that cannot be rendered for these parameters."""


def render_command(harness: HarnessDef, task: TaskDef, params: dict[str, Any], *,
                   model_id: str, api_key_env: str | None,
                   server_tokenizer: bool = False) -> str:
    """The harness command line, with ``$HPCEVAL_*`` references for the in-job values.
    ``server_tokenizer``: the model's server answers the tokenizer routes (its engine's
    ``tokenizer_routes``)."""
    context: dict[str, Any] = {
        "task": task, "harness": harness, "model_id": model_id, "api_key_env": api_key_env,
        "server_tokenizer": server_tokenizer,
        "params": params, "lm_eval_tasks_dir": str(lm_eval_tasks_dir()),
        **{name: runtime_token(var) for name, var in RUNTIME_VALUES.items()},
    }
    try:
        text = _compiled(harness.command).render(context)
        return substitute_runtime_values(text.strip())
    except (jinja2.TemplateError, ValueError) as exc:
        raise CommandError(f"harness {harness.name!r} command could not be rendered: "
                           f"{exc}") from exc


def substitute_runtime_values(text: str) -> str:
    """Replace placeholder tokens by ``$VAR`` references written for their quoting context."""
    if "\x00" not in text:  # no token (and no NUL): the loop below would copy it as it is
        return text
    out: list[str] = []
    state = "bare"  # bare | single | double
    segment = 0  # len(out) just after the opening quote of the current '...' segment
    i = 0
    while i < len(text):
        # Characters other than NUL, quotes and backslashes change nothing: copied in one
        # piece (char by char, this loop was a tenth of a sweep's submit).
        special = _SPECIAL.search(text, i)
        end = len(text) if special is None else special.start()
        if end > i:
            out.append(text[i:end])
            i = end
            continue
        hit = _token_at(text, i)
        if hit is not None:
            name, length = hit
            ref = '"${' + name + '}"'
            i += length
            if state == "double":
                out.append(ref[1:-1])
            elif state == "bare":
                out.append(ref)
            else:  # close '...', add the reference, reopen; empty '' pairs are left out
                if len(out) == segment:
                    out.pop()
                else:
                    out.append("'")
                out.append(ref)
                if i < len(text) and text[i] == "'":
                    state, i = "bare", i + 1
                else:
                    out.append("'")
                    segment = len(out)
            continue
        ch = text[i]
        if ch == "\x00":
            raise ValueError("a NUL character reached a harness command")
        if state == "single":
            state = "bare" if ch == "'" else state
        elif ch == "\\" and i + 1 < len(text):
            out.append(text[i:i + 2])
            i += 2
            continue
        elif ch == "'" and state == "bare":
            state = "single"
            out.append(ch)
            segment = len(out)
            i += 1
            continue
        elif ch == '"':
            state = "double" if state == "bare" else "bare"
        out.append(ch)
        i += 1
    return "".join(out)


def _token_at(text: str, i: int) -> tuple[str, int] | None:
    """(variable, token length) of the placeholder at ``i``, if one starts there."""
    if text[i] != "\x00":
        return None
    m = _TOKEN_AT.match(text, i)
    return (m.group(1), m.end() - i) if m else None
