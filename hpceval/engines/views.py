"""What an engine reads of a deployment: a narrow, read-only view of config's DeploymentSpec.

Engines sit below config (config asks them for GPU needs, checks and command lines), so they
type what they read with this protocol instead of importing the schema; DeploymentSpec and
AuxiliaryDeploymentSpec satisfy it structurally. A key an engine starts reading is added here
first; mypy then says whether the schema still provides it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Protocol


class DeploymentView(Protocol):
    """A deployment section (``deployment`` or ``auxiliary_deployments.<name>``)."""

    # a dataclass: engines derive a variant with dataclasses.replace (vLLM's flag probe)
    __dataclass_fields__: ClassVar[dict[str, Any]]

    @property
    def type(self) -> str: ...
    @property
    def checkpoint_path(self) -> str | None: ...
    @property
    def hf_model_handle(self) -> str | None: ...
    @property
    def tensor_parallel_size(self) -> int: ...
    @property
    def pipeline_parallel_size(self) -> int: ...
    @property
    def gpus_per_instance(self) -> int | None: ...
    @property
    def multi_node_backend(self) -> str: ...
    @property
    def max_model_len(self) -> int | None: ...
    @property
    def gpu_memory_utilization(self) -> float: ...
    @property
    def extra_args(self) -> Sequence[str]: ...
    @property
    def image(self) -> str | None: ...
    @property
    def command(self) -> str | None: ...
