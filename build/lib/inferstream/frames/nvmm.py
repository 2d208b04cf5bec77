"""DeepStream NVMM batches (``video/x-raw(memory:NVMM)`` from ``nvstreammux``) as RawFrames, via pyservicemaker.

One such buffer is a whole batch: ``NvDsBatchMeta`` lists one ``NvDsFrameMeta`` per surface, and
``Buffer.extract(batch_id)`` gives that surface as a pyservicemaker ``Tensor`` (DLPack, always on CUDA). On RGB /
RGBA surfaces it is ``HWC`` uint8 whose row stride may be the surface pitch; ``torch.from_dlpack`` keeps those
strides, so the views are zero-copy and pitch-aware. ``batch_id`` is only the position in the batch; the stream
is ``pad_index`` (the muxer's sink pad) / ``source_id``.

The views alias the buffer's surfaces: use them only inside ``mapped_nvmm_batch`` (``ModelStep.infer`` copies the
pixels into its input tensor and ends with a device-to-host copy, so nothing still reads them afterwards), or
``.clone()`` them. pyservicemaker's ``__dlpack__`` takes no stream: the surfaces are read as written once the
upstream element pushed the buffer (NVIDIA's converters finish their transform before they push).

Nothing here imports pyservicemaker or torch at module import: ``pyservicemaker_available`` only looks the
package up. The pure parts (``batch_slots``, ``tensor_frame``) are tested on CPU in
``tests/frames/test_nvmm_pure.py``.
"""
from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from inferstream.errors import UnsupportedFormatError
from inferstream.rawframe import RawFrame

if TYPE_CHECKING:
    import torch
    from gi.repository import Gst

NVMM_MEMORY: Final = "memory:NVMM"
NVMM_FORMATS: Final = ("RGBA", "RGB")  # extract() gives HWC tensors for these; convert NV12 with nvvideoconvert
_FORMAT_BY_CHANNELS: Final = {3: "RGB", 4: "RGBA"}


def pyservicemaker_available() -> bool:
    """Whether pyservicemaker can be imported (looked up, not imported: the plugin scan must stay light)."""
    try:
        return importlib.util.find_spec("pyservicemaker") is not None
    except (ImportError, ValueError):
        return False


@dataclass(frozen=True, slots=True)
class BatchSlot:
    """Where one frame of a muxed batch sits and where it comes from.

    Attributes:
        batch_id: index of its surface in the batch (``extract`` argument).
        pad_index: the muxer sink pad it entered by (the stream).
        source_id: the stream's source id.
        frame_number: the stream's frame counter.
        muxer_size: ``(width, height)`` of the muxer's output (``pipeline_width/height``), the pixels of
            ``rect_params``.
    """

    batch_id: int
    pad_index: int
    source_id: int
    frame_number: int
    muxer_size: tuple[int, int]


def batch_slots(frame_metas: Iterable[Any]) -> list[tuple[BatchSlot, Any]]:
    """Each frame meta with its ``BatchSlot``, in batch order.

    Args:
        frame_metas: objects with pyservicemaker ``FrameMetadata``'s attributes (``batch_id``, ``pad_index``,
            ``source_id``, ``frame_number``, ``pipeline_width``, ``pipeline_height``).

    Raises:
        UnsupportedFormatError: two frames with one ``batch_id``, or a muxer size that is not positive.
    """
    out = []
    for fm in frame_metas:
        slot = BatchSlot(int(fm.batch_id), int(fm.pad_index), int(fm.source_id), int(fm.frame_number),
                         (int(fm.pipeline_width), int(fm.pipeline_height)))
        if min(slot.muxer_size) <= 0:
            raise UnsupportedFormatError(f"frame meta of pad {slot.pad_index}: muxer size {slot.muxer_size} "
                                         "(set nvstreammux width/height)")
        out.append((slot, fm))
    out.sort(key=lambda pair: pair[0].batch_id)
    ids = [slot.batch_id for slot, _ in out]
    if len(set(ids)) != len(ids):
        raise UnsupportedFormatError(f"batch ids {ids}: each frame of a batch must have its own")
    return out


def tensor_frame(t: torch.Tensor) -> RawFrame:
    """A RawFrame viewing an ``HWC`` uint8 surface tensor (rows may be pitched; pixels must be packed).

    Raises:
        UnsupportedFormatError: not 3-D uint8 with 3 or 4 channels, or channels not adjacent in memory.
    """
    import torch

    if t.dtype != torch.uint8 or t.ndim != 3 or t.shape[2] not in _FORMAT_BY_CHANNELS:
        raise UnsupportedFormatError(f"NVMM surface: expected an HWC uint8 tensor with 3 or 4 channels, got "
                                     f"{t.dtype} {tuple(t.shape)} (put nvvideoconvert ! "
                                     "video/x-raw(memory:NVMM),format=RGBA before pyinfer)")
    if t.stride(2) != 1 or t.stride(1) != t.shape[2] or t.stride(0) < t.shape[1] * t.shape[2]:
        raise UnsupportedFormatError(f"NVMM surface: strides {t.stride()} are not packed rows of "
                                     f"{t.shape[1]}x{t.shape[2]} bytes")
    return RawFrame(_FORMAT_BY_CHANNELS[t.shape[2]], int(t.shape[1]), int(t.shape[0]), (t,))


@contextmanager
def mapped_nvmm_batch(buf: Gst.Buffer) -> Iterator[tuple[Any, list[tuple[BatchSlot, Any]], list[RawFrame]]]:
    """``(batch_meta, [(slot, frame_meta)], frames)`` of an nvstreammux buffer; the frames in slot order.

    Raises:
        UnsupportedFormatError: the buffer carries no batch (no ``NvDsBatchMeta``: nvstreammux is not upstream).
    """
    import torch
    from pyservicemaker import Buffer  # type: ignore[import-not-found]  # DeepStream only

    batch = Buffer(buf)
    if not batch.batch_size:  # Buffer() of anything but a Gst.Buffer is silently empty too
        raise UnsupportedFormatError("NVMM buffer without NvDsBatchMeta: put nvstreammux upstream of pyinfer")
    batch_meta = batch.batch_meta
    slots = batch_slots(batch_meta.frame_items)
    frames = [tensor_frame(torch.utils.dlpack.from_dlpack(batch.extract(slot.batch_id))) for slot, _ in slots]
    yield batch_meta, slots, frames
