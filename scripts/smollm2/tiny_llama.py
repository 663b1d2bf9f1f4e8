"""A tiny random-weight Llama with SmolLM2's tokenizer: the model of the parallel-layout tests.

    python scripts/smollm2/tiny_llama.py SMOLLM2_DIR DEST

SmolLM2-135M has 9 attention heads and 3 KV heads, so vLLM refuses tensor parallelism of 2 or
4 for it. This model has 8 heads and 4 KV heads (TP=2 and TP=4 divide them), 4 layers (PP=2 and
PP=4 divide them), hidden size 256: about 15 M parameters, made in a second. Its weights are
random (a fixed seed), so its scores mean nothing; what the tests check is that every layout
serves it and gives the SAME greedy generations and log-likelihood choices. The tokenizer and
chat template are SmolLM2's, copied byte for byte from SMOLLM2_DIR (scripts/smollm2/prepare.py's
output), so lm-eval's tasks and chat requests work unchanged.

Deterministic: same seed, same config, same transformers and torch (scripts/smollm2/install.sh
pins them) give the same bytes every time; the marker records every file's sha256 and a DEST
whose marker matches is left alone (idempotent). Written to a temporary sibling and renamed
into place, like prepare.py's conversion.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import sys
from pathlib import Path

# run as a script: its folder is on sys.path, beside the SmolLM2 conversion it shares these with
from prepare import file_hashes, publish

MARKER = ".hpceval-tiny-llama.json"
FORMAT = 1  # bump when the model below changes, so old outputs are redone
SEED = 20261201
# Copied from SmolLM2: everything the tokenizer, chat template and generation defaults need.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "chat_template.jinja", "generation_config.json")
SHAPE = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4,
         "num_attention_heads": 8, "num_key_value_heads": 4, "max_position_embeddings": 2048}
# Wider than transformers' default (0.02): with near-uniform logits a greedy choice could
# flip on the last bits of a reduction done in another order (TP=2 sums partial products);
# spread logits keep the top token clear of the second.
INIT_RANGE = 0.25


def is_complete(dest: Path) -> bool:
    try:
        marker = json.loads((dest / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(marker.get("format") == FORMAT and marker.get("files") == file_hashes(dest, MARKER))


def build(source: Path, out: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    base = json.loads((source / "config.json").read_text(encoding="utf-8"))
    config = LlamaConfig(
        vocab_size=base["vocab_size"], bos_token_id=base.get("bos_token_id"),
        eos_token_id=base.get("eos_token_id"), pad_token_id=base.get("pad_token_id"),
        rope_theta=base.get("rope_theta", 10000.0), rms_norm_eps=base.get("rms_norm_eps", 1e-5),
        tie_word_embeddings=True, initializer_range=INIT_RANGE, **SHAPE)
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out)
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, out / name)
    if not (out / "tokenizer.json").is_file():
        raise SystemExit(f"{source} has no tokenizer.json: run scripts/smollm2/prepare.py first")


def prepare(source: Path, dest: Path) -> bool:
    """Make DEST the tiny model; False if it already was."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / f".{dest.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_complete(dest):
            return False
        tmp = dest.parent / f".{dest.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            build(source, tmp)
            publish(tmp, dest, MARKER,
                    {"format": FORMAT, "seed": SEED, "files": file_hashes(tmp, MARKER)})
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="SmolLM2 HF directory (its tokenizer)")
    parser.add_argument("dest", type=Path, help="output directory (an HF model directory)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")  # no progress bars in CI logs
    dest = args.dest.expanduser().resolve()
    made = prepare(args.source.expanduser().resolve(), dest)
    print(f"{dest}: {'written' if made else 'already complete'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
