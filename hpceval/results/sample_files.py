"""Where a harness's per-sample files are: the one place that knows their names.

lm-eval (and the eval-factory harnesses built on it) write ``samples_<task>_<date>.jsonl``
somewhere under the task's ``harness/`` directory when run with ``--log_samples``. The report's
answers (report.samples) and the statistics (results.paired) both read them through here.
"""

from __future__ import annotations

import os

SAMPLES_GLOB_PREFIX = "samples_"
SAMPLES_SUFFIX = ".jsonl"


def sample_files(task_dir: str) -> list[str]:
    """The harness's sample files under task_dir/harness, as paths relative to task_dir."""
    root = f"{task_dir}/harness"  # not os.path.join: once per task of a report
    found: list[str] = []
    for folder, _dirs, files in os.walk(root):
        for name in files:
            if name.startswith(SAMPLES_GLOB_PREFIX) and name.endswith(SAMPLES_SUFFIX):
                found.append(os.path.relpath(os.path.join(folder, name), task_dir))
    return sorted(found)


def subtask_of(rel: str) -> str:
    """The (sub)task a sample file belongs to: samples_<subtask>_<date>.jsonl."""
    name = os.path.basename(rel)[len(SAMPLES_GLOB_PREFIX):-len(SAMPLES_SUFFIX)]
    return name.rsplit("_", 1)[0] if "_" in name else name
