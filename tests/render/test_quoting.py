"""Shell safety by construction: hostile values stay literal data in every rendered script."""

from __future__ import annotations

import os
import subprocess

import jinja2
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hpceval.render.quoting import (
    UNSET_IN_JOB,
    ShellCode,
    argv,
    command_lines,
    comment,
    env_name,
    make_environment,
    passed_env,
    passed_env_names,
    quote,
    shell_code,
    var,
)
from hpceval.resources import templates_dir
from hpceval.tasks.command import runtime_token, substitute_runtime_values

# Everything bash treats specially, plus unicode and leading dashes; never NUL (bash cannot
# hold it: render_job rejects it with a ConfigError instead).
SPECIAL = " \t\n'\"`$\\;|&<>(){}[]*?!#~=%^,:-\u00e9\u4e2d\u0394\U0001f600\u200b\r"
hostile = st.text(
    alphabet=st.one_of(st.sampled_from(SPECIAL), st.characters(
        blacklist_categories=("Cs",), blacklist_characters="\x00")),
    max_size=40,
) | st.sampled_from(["$(touch /tmp/pwned)", "`id`", "'; rm -rf ~; '", "--help", "-n",
                     "a\nb", "${HOME}", "$'x'", '"', "'", "\\", "", " ", "*", "~root",
                     "--bind=/:/host", "x'\"'\"'y"])


def run_bash(script: str, env: dict[str, str] | None = None) -> bytes:
    proc = subprocess.run(["bash", "-c", script], capture_output=True, check=False,
                          env={"PATH": os.environ["PATH"], **(env or {})})
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return proc.stdout


ENV = make_environment(templates_dir())
ECHO = ENV.from_string("printf '%s\\0' {% for v in values %}{{ v }} {% endfor %}\n")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(hostile, min_size=40, max_size=60))
def test_every_expression_is_one_literal_word(values: list[str]) -> None:
    # 25 examples x 40-60 values: over 1000 hostile strings, one bash per example.
    out = run_bash(ECHO.render(values=values))
    assert out.split(b"\0")[:-1] == [v.encode() for v in values]


@settings(max_examples=25, deadline=None)
@given(st.lists(hostile, min_size=1, max_size=8))
def test_lists_become_several_words_and_command_lines_keep_them(values: list[str]) -> None:
    words = ["--flag", *values, "tail"]
    out = run_bash("printf '%s\\0' " + ENV.from_string("{{ v }}").render(v=words) + "\n"
                   "printf '%s\\0' " + command_lines(words) + "\n")
    expected = [w.encode() for w in words]
    assert out.split(b"\0")[:-1] == expected + expected


def test_shell_code_is_the_only_unquoted_path() -> None:
    assert ENV.from_string("{{ v }}").render(v="$(id)") == "'$(id)'"
    assert ENV.from_string("{{ v|shell_code }}").render(v="ulimit -n 1") == "ulimit -n 1"
    assert ENV.from_string("{{ v }}").render(v=ShellCode('"$PORT"')) == '"$PORT"'
    assert ENV.from_string("{{ v ~ 'x' }}").render(v=ShellCode("$PORT")) == "'$PORTx'"
    with pytest.raises(ValueError, match="not a valid environment variable"):
        ENV.from_string("{{ v|env_name }}").render(v="A;B")
    with pytest.raises(jinja2.UndefinedError):
        ENV.from_string("{{ missing }}").render()


@settings(max_examples=50, deadline=None)
@given(hostile)
@example("x\nprintf escaped")
@example("\n\nprintf escaped; exit 3\n")
def test_comments_cannot_be_escaped(value: str) -> None:
    script = ENV.from_string("# note: {{ v|comment }}\nprintf ok\n").render(v=value)
    # bash ends a line only at \n: every such line of the comment must start with "#" ...
    assert all(line.startswith("#") for line in script.split("\n")[:-2]), script
    # ... and nothing of the value runs (set -e: any command that ran and failed stops it)
    assert run_bash("set -e\n" + script) == b"ok"


@settings(max_examples=40, deadline=None)
@given(st.lists(hostile, min_size=3, max_size=3), hostile)
def test_runtime_values_are_substituted_for_their_quoting_context(
        values: list[str], url: str) -> None:
    # A catalogue template concatenates a runtime value into a quoted word (lm-eval's
    # --model_args); the placeholder becomes "$HPCEVAL_ENDPOINT_URL" in each quoting context.
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["q"] = __import__("shlex").quote
    token = runtime_token("HPCEVAL_ENDPOINT_URL")
    a, b, c = values
    text = env.from_string(
        "printf '%s\\0' {{ (a ~ url ~ b)|q }} {{ url|q }} {{ c|q }} pre{{ url|q }}post "
        "\"dq{{ url }}\" " + token).render(a=a, b=b, c=c, url=token)
    script = f"HPCEVAL_ENDPOINT_URL={__import__('shlex').quote(url)}\n"
    out = run_bash(script + substitute_runtime_values(text))
    assert out.split(b"\0")[:-1] == [x.encode() for x in (
        a + url + b, url, c, "pre" + url + "post", "dq" + url, url)]


# -- each helper, one behavioural test: the value comes back literal through bash -----------
# (a value that bash would split, glob or expand if a helper dropped its quotes)
SPLIT_AND_GLOB = st.sampled_from(["a  b", " lead", "trail ", "*", "/*", "a\tb", "x\ny", "?", "[ab]",
                                  "$HOME", "-n", ""]) | hostile


@settings(max_examples=30, deadline=None)
@given(SPLIT_AND_GLOB)
def test_var_is_one_literal_word_whatever_the_value(value: str) -> None:
    out = run_bash(f"printf '%s\\0' {var('V')} end\n", env={"V": value})
    assert out.split(b"\0")[:-1] == [value.encode(), b"end"]


@settings(max_examples=30, deadline=None)
@given(SPLIT_AND_GLOB.filter(bool))  # ${NAME:?...} refuses an empty value like an unset one
def test_passed_env_is_one_literal_word_and_refuses_unset(value: str) -> None:
    script = f"printf '%s\\0' {passed_env('SECRET_NAME')} end\n"
    assert run_bash(script, env={"SECRET_NAME": value}).split(b"\0")[:-1] == [value.encode(),
                                                                                 b"end"]
    proc = subprocess.run(["bash", "-c", script], capture_output=True, check=False, env={})
    assert proc.returncode != 0 and UNSET_IN_JOB.encode() in proc.stderr
    assert passed_env_names(f"x={passed_env('B')} {passed_env('A')} {passed_env('B')}"
                            " ${C} $D") == ["A", "B"]


@settings(max_examples=25, deadline=None)
@given(st.lists(SPLIT_AND_GLOB, max_size=8))
def test_argv_and_quote_keep_every_value_one_literal_word(values: list[str]) -> None:
    out = run_bash(f"printf '%s\\0' {argv(values)} end\n"
                   f"printf '%s\\0' {quote(values)} end\n")
    expected = [v.encode() for v in values] + [b"end"]
    assert out.split(b"\0")[:-1] == expected + expected
    assert run_bash(f"printf '%s' {quote(True)} {quote(7)} {quote(ShellCode('$((1+1))'))}"
                    ) == b"true72"


def test_env_name_admits_only_names_and_they_work_unquoted() -> None:
    assert run_bash(f"export {env_name('MY_VAR_1')}=ok; printf '%s' \"$MY_VAR_1\"") == b"ok"
    for bad in ("A;B", "1A", "A B", "$(id)", "", "A-B", "A\nB"):
        with pytest.raises(ValueError, match="not a valid environment variable"):
            env_name(bad)


def test_shell_code_is_verbatim_and_comment_keeps_every_line_commented() -> None:
    assert run_bash(f"{shell_code('printf %s shell')}\n") == b"shell"
    text = comment("one\nprintf two\n\nprintf three")
    assert run_bash(f"set -e\n# {text}\nprintf ok") == b"ok"


def test_joined_quotes_each_value_and_only_takes_a_fixed_flag_and_separator() -> None:
    from hpceval.shell import FlagWord, ShellCode, joined

    word = joined(["/a b", ShellCode('"$MODEL_DIR"/x'), "c'd"], ",", "--container-mounts=")
    assert isinstance(word, FlagWord)
    assert word == "--container-mounts='/a b',\"$MODEL_DIR\"/x,'c'\"'\"'d'"
    plain = joined(["x", "y z"], ":")
    assert type(plain) is ShellCode and plain == "x:'y z'"
    for sep, prefix in ((";", ""), (",", "--a=;b="), (":", "-x="), (" ", "--flag=")):
        with pytest.raises(ValueError, match=r"^joined: .* is not a fixed separator and flag$"):
            joined(["v"], sep, prefix)
