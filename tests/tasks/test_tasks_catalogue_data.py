"""The shipped catalogue: coverage, images, and the rules the data must keep."""

from __future__ import annotations

import re
from collections import Counter

from hpceval.tasks import ENDPOINT_TYPES, Catalogue

# NeMo Evaluator launcher's 26.03 catalogue lists these harnesses (421 tasks in all).
NEL_HARNESSES = {
    "lm-evaluation-harness": 133,
    "simple_evals": 88,
    "bigcode-evaluation-harness": 27,
    "codec": 27,
    "nemo_skills": 20,  # 26 in 26.03; the 20 of 26.01 are the ones we could verify
    "ruler": 20,
    "mteb": 19,  # 20 in 26.03; likewise
    "helm": 15,
    "livecodebench": 14,
    "mmath": 10,
    "vlmevalkit": 7,
    "bfcl": 6,
    "safety_eval": 6,
    "genai_perf_eval": 4,
    "scicode": 3,
    "tau2_bench": 3,
    "mtbench": 2,
    "ifbench": 2,
    "hle": 2,
    "profbench": 2,
    "garak": 2,
    "tooltalk": 1,
    "AA-LCR": 1,
}


def test_totals(builtin: Catalogue) -> None:
    assert len(builtin.tasks) >= 421
    assert len(builtin.harnesses) >= 23


def test_every_nel_harness_with_its_task_count(builtin: Catalogue) -> None:
    counts = Counter(t.harness for t in builtin.tasks)
    for harness, expected in NEL_HARNESSES.items():
        assert counts[harness] == expected, harness


def test_an_upstream_host_side_harness_exists(builtin: Catalogue) -> None:
    upstream = builtin.harnesses["lm-eval-upstream"]
    assert upstream.runtime == "host"
    assert upstream.image is None
    assert upstream.pip_package and upstream.pip_package.startswith("lm-eval")
    assert upstream.parser == "lm_eval"
    assert len(builtin.list(harness="lm-eval-upstream")) >= 10


def test_container_harnesses_pin_images_and_name_their_sif(builtin: Catalogue) -> None:
    for h in builtin.harnesses.values():
        if h.runtime != "container":
            continue
        assert h.image and h.sif
        match = re.fullmatch(r"nvcr\.io/nvidia/eval-factory/([a-z0-9-]+):(26\.03)", h.image)
        assert match, h.image
        assert h.sif == f"eval-factory_{match.group(1)}_{match.group(2)}.sif"


def test_tasks_inherit_image_and_have_sane_fields(builtin: Catalogue) -> None:
    for t in builtin.tasks:
        harness = builtin.harnesses[t.harness]
        assert t.endpoint_type in ENDPOINT_TYPES
        assert t.image == harness.image and t.sif == harness.sif
        assert t.description.strip()
        assert "." not in t.harness
        if t.needs_judge and harness.runtime == "container":
            # the eval-factory judges are external APIs; hpceval's own judged lm-eval task
            # (lm-eval-upstream.judged_qa) is usually served a judge in the job: no key needed
            assert "JUDGE_API_KEY" in t.required_env, t.qualified_name
        assert set(harness.required_env) <= set(t.required_env)


def test_endpoint_types_cover_all_four(builtin: Catalogue) -> None:
    counts = Counter(t.endpoint_type for t in builtin.tasks)
    assert set(counts) == set(ENDPOINT_TYPES)
    assert counts["embedding"] == 19 and counts["vlm"] == 7


def test_qualified_names_are_unique(builtin: Catalogue) -> None:
    names = [t.qualified_name for t in builtin.tasks]
    assert len(names) == len(set(names))


def test_every_shared_short_name_has_one_canonical_or_is_listed_as_ambiguous(
    builtin: Catalogue,
) -> None:
    # mgsm stays ambiguous on purpose: lm-eval's few-shot and simple-evals' zero-shot chat
    # protocols are both widely reported, and neither is "the" MGSM.
    intentionally_ambiguous = {"mgsm"}
    by_name: dict[str, list[str]] = {}
    for t in builtin.tasks:
        if not builtin.harnesses[t.harness].qualified_only:
            by_name.setdefault(t.name, []).append(t.harness)
    for name, harnesses in by_name.items():
        if len(harnesses) < 2 or name in intentionally_ambiguous:
            continue
        canonical = [t for t in builtin.tasks if t.name == name and t.canonical]
        assert len(canonical) == 1, (name, harnesses)


def test_list_filters(builtin: Catalogue) -> None:
    vlm = builtin.list(endpoint_type="vlm")
    assert vlm and all(t.endpoint_type == "vlm" for t in vlm)
    chat_se = builtin.list(harness="simple-evals", endpoint_type="chat")  # harness alias works
    assert len(chat_se) == 88
    assert builtin.list(harness="mteb", endpoint_type="chat") == []
    assert len(builtin.list()) == len(builtin.tasks)
