"""A little of bash's and sbatch's lexing, enough to say where a value landed in a job script.

Imported by name from tests/config (this folder has no __init__.py).
"""

from __future__ import annotations


def check_header(text: str) -> None:
    """sbatch reads #SBATCH lines up to the first command; each must stay one word."""
    flags: list[str] = []
    for line in text.splitlines()[1:]:
        if line.strip() and not line.startswith("#"):
            break
        if line.startswith("#SBATCH"):
            words = sbatch_words(line[len("#SBATCH"):])
            assert len(words) == 1 and words[0].startswith("--"), line[:300]
            flags.append(words[0].split("=", 1)[0])
    assert flags and len(flags) == len(set(flags)), flags
    assert "--wrap" not in flags


def sbatch_words(rest: str) -> list[str]:
    """Split an #SBATCH line as sbatch does: quotes group, backslash escapes, # ends it."""
    words: list[str] = []
    word: list[str] | None = None
    quote = ""
    i = 0
    while i < len(rest):
        ch = rest[i]
        if ch == "\\" and i + 1 < len(rest):
            word = (word or []) + [rest[i + 1]]
            i += 2
            continue
        if quote:
            quote = "" if ch == quote else quote
            if quote:
                word = (word or []) + [ch]
        elif ch in "\"'":
            quote, word = ch, word or []
        elif ch == "#":
            break
        elif ch.isspace():
            if word is not None:
                words.append("".join(word))
            word = None
        else:
            word = (word or []) + [ch]
        i += 1
    if word is not None:
        words.append("".join(word))
    return words


def quoting_contexts(text: str) -> list[str]:
    """For each character: bare | single | double | cmd | comment (innermost bash context).

    Enough of bash's lexer for these scripts: quotes, $( ) and $(( )) nesting, backticks,
    backslash escapes and # comments. It errs towards "not single", so a bug makes the test
    fail, never pass.
    """
    ctx = [""] * len(text)
    stack = ["bare"]
    word_start = True
    i = 0
    while i < len(text):
        top, ch = stack[-1], text[i]
        ctx[i] = top
        if top == "comment":
            if ch == "\n":
                stack.pop()
                word_start = True
            i += 1
            continue
        if top == "single":
            if ch == "'":
                stack.pop()
            i += 1
            continue
        if ch == "\\":
            if i + 1 < len(text):
                ctx[i + 1] = f"{top}-escaped"
            i, word_start = i + 2, False
            continue
        if text.startswith("$(", i):
            stack.append("cmd")
            ctx[i + 1] = "cmd"
            i, word_start = i + 2, True
            continue
        if top == "double":
            if ch == '"':
                stack.pop()
            elif ch == "`":
                stack.append("tick")
            i += 1
            continue
        if ch == "#" and word_start:
            stack.append("comment")
            ctx[i] = "comment"
        elif ch == "'":
            stack.append("single")
        elif ch == '"':
            stack.append("double")
        elif ch == "`":
            if top == "tick":
                stack.pop()
            else:
                stack.append("tick")
        elif ch == "(" and top in ("cmd", "paren"):
            stack.append("paren")
        elif ch == ")" and top in ("cmd", "paren"):
            stack.pop()
        word_start = ch in " \t\n;|&()"
        i += 1
    return ctx


def single_quoted_segment(text: str, ctx: list[str], at: int) -> str:
    start = at
    while ctx[start - 1] == "single":
        start -= 1
    end = at
    while end + 1 < len(text) and ctx[end + 1] == "single":
        end += 1
    return text[start - 1:end + 1]  # from the opening quote to the closing one
