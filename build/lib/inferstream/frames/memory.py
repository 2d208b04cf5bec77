"""One table from a buffer's memory kind to how its frame is mapped: the runner asks here, never the element.

- ``system``: a numpy view of the mapped buffer (``frames.system``);
- ``cuda``: ``GstCudaMemory`` mapped on the GPU, on the memory's CUDA stream (``frames.cuda``);
- ``nvmm``: a DeepStream buffer holds a whole muxed batch; it is mapped, inferred and written at once
  (``frames.nvmm`` through ``meta.nvds.infer_nvmm_batch``), so it has no per-frame mapper here.
"""
from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from inferstream.frames.system import FrameFormat
    from inferstream.rawframe import RawFrame

MEMORY_KINDS: Final = ("system", "cuda", "nvmm")

Mapper = Callable[[Any], AbstractContextManager["RawFrame"]]
"""``mapper(buffer)``: the buffer's frame, valid inside the with-block (R10)."""


def memory_kind(cuda_memory: bool, nvmm: bool) -> str:
    """The kind the negotiated caps' memory feature names."""
    return "nvmm" if nvmm else "cuda" if cuda_memory else "system"


def frame_mapper(kind: str, fmt: FrameFormat | None, device: int | None = None) -> Mapper:
    """How a buffer of ``kind`` memory with the caps' ``fmt`` is mapped (``device``: the CUDA ordinal of the
    pipeline's context, for ``cuda``).

    Raises:
        ValueError: ``nvmm`` (mapped as a batch) or an unknown kind.
    """
    # the module's function is looked up per frame, as a plain import in the call would (bench/gpu/stages.py wraps it)
    if kind == "system":
        from inferstream.frames import system

        return lambda buf: system.mapped_frame(buf, fmt)
    if kind == "cuda":
        from inferstream.frames import cuda

        return lambda buf: cuda.mapped_cuda_frame(buf, fmt, device=device)
    raise ValueError(f"no per-frame mapping for {kind!r} memory (one of {list(MEMORY_KINDS[:2])})")


def cuda_memory_unavailable(device: str) -> str | None:
    """Why a model on torch ``device`` cannot take CUDA-memory frames, or None when it can (torch sees the GPU and
    GStreamer's CUDA library loads)."""
    if not device.startswith("cuda"):
        return f"device={device}"
    try:
        import torch

        if not torch.cuda.is_available():
            return "torch sees no CUDA device"
        import gi

        gi.require_version("GstCuda", "1.0")
        from gi.repository import GstCuda

        if not GstCuda.cuda_load_library():
            return "GStreamer's CUDA library could not load libcuda"
    except (ImportError, ValueError) as exc:
        return f"no GStreamer CUDA support ({exc})"
    return None
