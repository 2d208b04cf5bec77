"""frames.nvmm's pure parts on CPU: batch bookkeeping from frame metas, pitched HWC surface tensors as RawFrames.

The frame metas are plain records with pyservicemaker ``FrameMetadata``'s attribute names (bindings/metadata.h);
the surface tensors go through DLPack as ``Buffer.extract`` hands them to ``torch.from_dlpack``.
"""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from inferstream.errors import UnsupportedFormatError
from inferstream.frames.nvmm import BatchSlot, batch_slots, pyservicemaker_available, tensor_frame


def _meta(batch_id: int, pad_index: int, source_id: int, frame_number: int = 0,
          size: tuple[int, int] = (1280, 720)) -> SimpleNamespace:
    return SimpleNamespace(batch_id=batch_id, pad_index=pad_index, source_id=source_id, frame_number=frame_number,
                           pipeline_width=size[0], pipeline_height=size[1])


def test_batch_slots_orders_by_batch_id_and_keeps_stream_identity() -> None:
    """nvstreammux fills a batch in arrival order: batch_id says where a surface is, pad_index whose it is."""
    metas = [_meta(2, pad_index=0, source_id=0, frame_number=41), _meta(0, 3, 3, 17), _meta(1, 1, 5, 9)]
    slots = batch_slots(metas)
    assert [s for s, _ in slots] == [BatchSlot(0, 3, 3, 17, (1280, 720)), BatchSlot(1, 1, 5, 9, (1280, 720)),
                                     BatchSlot(2, 0, 0, 41, (1280, 720))]
    assert [m for _, m in slots] == [metas[1], metas[2], metas[0]]


def test_batch_slots_rejects_a_repeated_batch_id() -> None:
    with pytest.raises(UnsupportedFormatError, match=r"batch ids \[0, 1, 1\]"):
        batch_slots([_meta(1, 0, 0), _meta(0, 1, 1), _meta(1, 2, 2)])


def test_batch_slots_rejects_a_muxer_without_size() -> None:
    with pytest.raises(UnsupportedFormatError, match="set nvstreammux width/height"):
        batch_slots([_meta(0, 0, 0, size=(0, 720))])


@pytest.mark.parametrize(("channels", "fmt"), [(4, "RGBA"), (3, "RGB")])
def test_tensor_frame_keeps_the_surface_pitch(channels: int, fmt: str) -> None:
    """A 5x7 surface whose rows are 64 bytes apart (an NvBufSurface pitch), viewed through DLPack, not copied."""
    h, w, pitch = 5, 7, 64
    memory = torch.arange(h * pitch, dtype=torch.int64).remainder(251).to(torch.uint8)
    surface = memory.as_strided((h, w, channels), (pitch, channels, 1))
    frame = tensor_frame(torch.from_dlpack(surface))
    assert (frame.format, frame.width, frame.height) == (fmt, w, h)
    (plane,) = frame.planes
    assert plane.stride() == (pitch, channels, 1) and plane.data_ptr() == memory.data_ptr()
    expected = [[[(y * pitch + x * channels + c) % 251 for c in range(channels)] for x in range(w)] for y in range(h)]
    assert plane.tolist() == expected


@pytest.mark.parametrize(("tensor", "match"), [
    (torch.zeros((4, 6), dtype=torch.uint8), "HWC uint8 tensor with 3 or 4 channels"),  # NV12's luma plane
    (torch.zeros((4, 6, 2), dtype=torch.uint8), "3 or 4 channels"),
    (torch.zeros((4, 6, 4), dtype=torch.float32), "got torch.float32"),
    (torch.zeros((4, 4, 6), dtype=torch.uint8).permute(1, 2, 0)[:, :, :4], "not packed rows"),  # planar memory
])
def test_tensor_frame_rejects_what_it_cannot_view(tensor: torch.Tensor, match: str) -> None:
    with pytest.raises(UnsupportedFormatError, match=match):
        tensor_frame(tensor)


def test_pyservicemaker_is_not_installed_here() -> None:
    """The stock-GStreamer machines these tests run on have no DeepStream: NVMM stays off."""
    assert pyservicemaker_available() is False
