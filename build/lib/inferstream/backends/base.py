"""What every backend offers: a batch of letterboxed RGB in, the model's raw outputs out."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch
    from torch import Tensor


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """Facts carried by the model file itself (never guessed): they win over user defaults.

    Attributes:
        input_size: (height, width) the network expects, or None when the model takes any size.
        names: class labels embedded in the file (ultralytics ``names``, ONNX metadata), or None.
        task: ultralytics-style task hint ("detect", "obb", "segment", "pose"), or None when unknown.
        end2end: True when the model emits final detections (no NMS needed), None when unknown.
        static_batch: the batch size baked into the graph, or None when the batch dimension is dynamic.
    """

    input_size: tuple[int, int] | None = None
    names: tuple[str, ...] | None = None
    task: str | None = None
    end2end: bool | None = None
    static_batch: int | None = None
    extra: dict[str, str] = field(default_factory=dict)


class Backend(Protocol):
    """A loaded model on one device.

    ``__call__`` takes float RGB in [0, 1], NCHW ``Tensor[B, 3, H, W]`` on ``device`` with ``dtype``, and returns
    the raw outputs as a list of tensors on the same device (the order the model file declares them).
    """

    info: ModelInfo
    device: torch.device
    dtype: torch.dtype

    def __call__(self, batch: Tensor) -> list[Tensor]: ...

    def warmup(self, batch_size: int, input_size: tuple[int, int]) -> None: ...

    def close(self) -> None: ...
