"""Short-name resolution: canonical picks, aliases, did-you-mean, ambiguity, unlisted tasks."""

from __future__ import annotations

import pytest

from hpceval.tasks import (
    AmbiguousTaskError,
    Catalogue,
    TaskLookupError,
    UnknownHarnessError,
    UnknownTaskError,
)


@pytest.mark.parametrize(
    ("name", "qualified"),
    [
        # The benchmark, not the contamination check that shares its name.
        ("ifeval", "lm-evaluation-harness.ifeval"),
        ("hle", "hle.hle"),
        ("ifbench", "ifbench.ifbench"),
        ("scicode", "scicode.scicode"),
        # HumanEval is a completion benchmark; bigcode is its reference implementation.
        ("humaneval", "bigcode-evaluation-harness.humaneval"),
        ("humanevalplus", "bigcode-evaluation-harness.humanevalplus"),
        ("humaneval_instruct", "bigcode-evaluation-harness.humaneval_instruct"),
        ("gpqa_diamond", "simple_evals.gpqa_diamond"),
        # The pinned eval-factory image beats the host-side upstream lm-eval.
        ("mmlu", "lm-evaluation-harness.mmlu"),
        ("gsm8k", "lm-evaluation-harness.gsm8k"),
        # Unique names need no canonical flag.
        ("arc_easy", "lm-eval-upstream.arc_easy"),
        ("AIME_2025", "simple_evals.AIME_2025"),
    ],
)
def test_short_names(builtin: Catalogue, name: str, qualified: str) -> None:
    assert builtin.resolve(name).task.qualified_name == qualified


def test_note_says_what_was_picked_and_where_else_it_exists(builtin: Catalogue) -> None:
    res = builtin.resolve("ifeval")
    assert res.via == "canonical"
    assert res.also_in == ("codec", "lm-eval-upstream")
    assert res.note == "ifeval -> lm-evaluation-harness.ifeval (also in: codec, lm-eval-upstream)"
    assert builtin.resolve("gpqa_diamond").note == (
        "gpqa_diamond -> simple_evals.gpqa_diamond (also in: codec)"
    )
    assert builtin.resolve("arc_easy").note == "arc_easy -> lm-eval-upstream.arc_easy"


def test_qualified_names_always_work(builtin: Catalogue) -> None:
    assert builtin.resolve("codec.ifeval").task.harness == "codec"
    assert builtin.resolve("simple_evals.humaneval").task.harness == "simple_evals"
    assert builtin.resolve("lm-eval-upstream.mmlu").via == "qualified"
    # Harness aliases (the image names NeMo Evaluator users know) work in qualified names too.
    assert builtin.resolve("simple-evals.mgsm").task.qualified_name == "simple_evals.mgsm"
    assert builtin.resolve("contamination-detection.frames").task.qualified_name == "codec.frames"


@pytest.mark.parametrize(
    ("alias", "qualified"),
    [
        ("aegis", "safety_eval.aegis_v2"),
        ("aime25", "simple_evals.AIME_2025"),
        ("mt-bench", "mtbench.mtbench"),
        ("bfcl", "bfcl.bfclv3_ast"),
        ("mbpp", "bigcode-evaluation-harness.mbpp-chat"),
        ("humaneval+", "bigcode-evaluation-harness.humanevalplus"),
    ],
)
def test_aliases(builtin: Catalogue, alias: str, qualified: str) -> None:
    res = builtin.resolve(alias)
    assert res.task.qualified_name == qualified
    assert res.via == "alias"
    assert res.note == f"{alias} -> {qualified} (alias)"


def test_aliases_are_listed_on_the_task(builtin: Catalogue) -> None:
    assert "aegis" in builtin.resolve("safety_eval.aegis_v2").task.aliases


def test_case_insensitive_fallback_skips_qualified_only_harnesses(builtin: Catalogue) -> None:
    # codec.aime_2025 has this exact name, but short names never land on a contamination check.
    res = builtin.resolve("aime_2025")
    assert res.task.qualified_name == "simple_evals.AIME_2025"
    assert (
        res.note == "aime_2025 -> simple_evals.AIME_2025 (case-insensitive match; also in: codec)"
    )


def test_name_only_in_a_qualified_only_harness(builtin: Catalogue) -> None:
    with pytest.raises(UnknownTaskError) as err:
        builtin.resolve("frames")
    assert err.value.suggestions == ("codec.frames",)
    assert "codec.frames" in str(err.value)


def test_ambiguous_without_canonical(builtin: Catalogue) -> None:
    with pytest.raises(AmbiguousTaskError) as err:
        builtin.resolve("mgsm")
    assert err.value.choices == ("lm-evaluation-harness.mgsm", "simple_evals.mgsm")
    assert "lm-evaluation-harness.mgsm" in str(err.value)
    assert isinstance(err.value, TaskLookupError)


@pytest.mark.parametrize(
    ("typo", "expected"),
    [
        ("ifevl", "ifeval"),
        ("gpqa_diamnd", "gpqa_diamond"),
        ("simple_evals.mmlu_pr", "simple_evals.mmlu_pro"),
    ],
)
def test_did_you_mean(builtin: Catalogue, typo: str, expected: str) -> None:
    with pytest.raises(UnknownTaskError) as err:
        builtin.resolve(typo)
    assert expected in err.value.suggestions
    assert "did you mean" in str(err.value)


def test_unlisted_task_of_a_known_harness(builtin: Catalogue) -> None:
    with pytest.raises(UnknownTaskError) as err:
        builtin.resolve("lm-evaluation-harness.some_new_task")
    assert "allow_unlisted" in str(err.value)

    res = builtin.resolve("lm-evaluation-harness.some_new_task", allow_unlisted=True)
    assert res.via == "unlisted"
    task = res.task
    assert task.unlisted and task.qualified_name == "lm-evaluation-harness.some_new_task"
    assert task.task_id == "some_new_task"
    assert task.image == builtin.harnesses["lm-evaluation-harness"].image
    assert task.endpoint_type == "completions"  # the harness's default
    assert "not in the catalogue" in res.note


def test_listed_task_is_returned_even_with_allow_unlisted(builtin: Catalogue) -> None:
    res = builtin.resolve("simple_evals.mmlu", allow_unlisted=True)
    assert res.via == "qualified" and not res.task.unlisted


def test_unknown_harness(builtin: Catalogue) -> None:
    with pytest.raises(UnknownHarnessError) as err:
        builtin.list(harness="simple_eval")
    assert "simple_evals" in err.value.suggestions
    # A dotted name whose prefix is no harness is treated as a (missing) short name.
    with pytest.raises(UnknownTaskError):
        builtin.resolve("nosuchharness.task", allow_unlisted=True)
