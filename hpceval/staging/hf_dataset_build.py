"""Build a Hugging Face datasets cache entry from a data file that ships inside a package.

Run as a script by the harness's own Python (the one that has ``datasets``), never imported by
hpceval, which does not depend on ``datasets``::

    python hf_dataset_build.py REPO_ID MODULE RELPATH SPLIT DATASETS_CACHE

``load_dataset(REPO_ID)`` with ``HF_DATASETS_OFFLINE=1`` then finds the data the way it finds a
dataset it downloaded before: the newest ``<org>___<name>/<config>/<version>/<hash>/`` folder
with a ``dataset_info.json``. The entry is built in a temporary folder and renamed into place,
so a reader never sees half of it and a second stager finds it complete.
"""

from __future__ import annotations

import gzip
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

CONFIG = "default"
HASH = "hpceval-packaged"  # names the entry as ours; load_dataset accepts any folder name


def main(repo_id: str, module: str, relpath: str, split: str, cache: str) -> int:
    from datasets.packaged_modules.json.json import Json  # type: ignore[import-untyped]

    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        print(f"package {module} is not installed in {sys.executable}", file=sys.stderr)
        return 1
    source = Path(next(iter(spec.submodule_search_locations))) / relpath
    org, name = repo_id.split("/")
    root = Path(cache)
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=".hpceval-build-") as tmp:
        plain = Path(tmp) / f"{split}.jsonl"
        data = source.read_bytes()
        plain.write_bytes(gzip.decompress(data) if source.suffix == ".gz" else data)
        # The builder may not carry repo_id: it insists that data files live in that repo.
        builder = Json(cache_dir=str(Path(tmp) / "cache"), dataset_name=name,
                       config_name=CONFIG, data_files={split: [str(plain)]}, hash=HASH)
        builder.download_and_prepare()
        built = Path(builder.cache_dir)
        dest = root / f"{org}___{name}" / CONFIG / built.parent.name / HASH
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(built, dest)
        except OSError:
            # another stager renamed its complete copy into place first: keep that one
            if not (dest / "dataset_info.json").is_file():
                raise
    print(dest)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 6:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(*sys.argv[1:]))
