"""A sweep as Slurm job arrays: as few as the cluster's MaxArraySize allows.

Slurm refuses an array whose largest index is MaxArraySize or more (1001 unless slurm.conf
says otherwise), so a sweep of more models is several arrays. Array j runs the models from its
offset on: its element i runs model ``offset + i``. The offset is the dispatcher's first
argument (templates/sweep.sbatch.j2 adds it to the element's index); on this side
``JobEntry.scheduler_id`` and ``JobEntry.element`` are the same mapping back. A sweep that fits
one array keeps offset 0 and its script's own ``--array``.

``execution.array_parallelism`` (``%K``) bounds one array's running elements: split, the K
slots are shared among the arrays, and where there are more arrays than slots an array waits
for the one K places before it to end, so at most K elements of the sweep run at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hpceval.errors import HpcevalError


@dataclass(frozen=True)
class ArrayPart:
    """One ``sbatch --array`` of a sweep: the models it runs, from `offset` on."""

    offset: int  # element i runs model offset + i
    models: tuple[int, ...]  # model indices, ascending
    throttle: int | None = None  # %K: at most this many of its elements at once
    waits_for: int | None = None  # the index of an earlier part this one starts after

    @property
    def elements(self) -> tuple[int, ...]:
        return tuple(m - self.offset for m in self.models)

    def spec(self) -> str:
        """The --array value: ranges where the elements are consecutive ("0-1000%4")."""
        text = ",".join(f"{a}-{b}" if b > a else str(a) for a, b in _runs(self.elements))
        return text + (f"%{self.throttle}" if self.throttle else "")


def split_sweep(models: Sequence[int], max_array_size: int,
                max_parallel: int | None = None) -> list[ArrayPart]:
    """The fewest arrays whose indices all stay below `max_array_size`, each model in exactly
    one: a part starts at its first model (offset 0 when every model fits one array)."""
    if max_array_size < 1:
        raise HpcevalError(f"job arrays are disabled on this cluster (MaxArraySize="
                           f"{max_array_size}), and a sweep is one array job or several",
                           "submit each model as a run of its own, or ask the admins for "
                           "arrays")
    todo = sorted(set(models))
    if not todo:
        raise ValueError("a sweep needs at least one model")
    groups: list[tuple[int, list[int]]] = []
    if todo[-1] < max_array_size:
        groups.append((0, todo))
    else:
        for model in todo:
            if not groups or model - groups[-1][0] >= max_array_size:
                groups.append((model, []))
            groups[-1][1].append(model)
    n = len(groups)
    parts = []
    for j, (offset, members) in enumerate(groups):
        throttle, waits = max_parallel, None
        if max_parallel and n > 1:
            share, extra = divmod(max_parallel, n)
            throttle = max(1, share + (1 if j < extra else 0))
            waits = j - max_parallel if j >= max_parallel else None
        parts.append(ArrayPart(offset, tuple(members), throttle, waits))
    return parts


def _runs(values: Sequence[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for v in values:
        if runs and v == runs[-1][1] + 1:
            runs[-1] = (runs[-1][0], v)
        else:
            runs.append((v, v))
    return runs
