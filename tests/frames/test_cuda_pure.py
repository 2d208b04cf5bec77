"""frames/cuda.py: plane layout maths and __cuda_array_interface__ dicts on CPU (the C struct layouts:
tests/native/test_structs.py); the zero-copy views and the GStreamer CUDA path where a GPU is present (skipped
otherwise)."""
from __future__ import annotations

import subprocess
import sys
from contextlib import AbstractContextManager, nullcontext

import pytest
import torch

from inferstream.errors import ConfigError, UnsupportedFormatError
from inferstream.frames import cuda
from inferstream.frames.cuda import CudaArrayView, PlaneLayout, cuda_array_interface, frame_nbytes, plane_layouts
from inferstream.frames.cuda_context import CudaContextMismatchError, mismatch_message, share_torch_context
from inferstream.rawframe import PACKED_FORMATS

HAS_GPU = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU (runs on the GPU machine, see bench/gpu)")


def _reference_pixel(layout: PlaneLayout, index: tuple[int, ...]) -> int:
    """Byte offset of one element, computed the obvious way."""
    return layout.offset + sum(i * s for i, s in zip(index, layout.strides))


def _strided_view(data: torch.Tensor, layout: PlaneLayout) -> torch.Tensor:
    return data.as_strided(layout.shape, layout.strides, layout.offset)


# --- plane_layouts ---------------------------------------------------------------------------------------------
def test_plane_layouts_nv12_pitched_720p() -> None:
    # what nvh264dec / cudaconvert allocate: pitch 1536 for a 1280-wide frame, UV after 720 pitched rows
    y, uv = plane_layouts("NV12", 1280, 720, [1536, 1536], [0, 1536 * 720])
    assert y == PlaneLayout(0, (720, 1280), (1536, 1))
    assert uv == PlaneLayout(1536 * 720, (360, 640, 2), (1536, 2, 1))


@pytest.mark.parametrize(("fmt", "channels"), [(f, 3 if len(f) == 3 else 4) for f in PACKED_FORMATS])
def test_plane_layouts_packed_shape_and_strides(fmt: str, channels: int) -> None:
    (p,) = plane_layouts(fmt, 641, 3, [4096], [128])
    assert p == PlaneLayout(128, (3, 641, channels), (4096, channels, 1))


def test_plane_layouts_i420_odd_size_rounds_chroma_up() -> None:
    y, u, v = plane_layouts("I420", 641, 481, [704, 352, 352], [0, 704 * 481, 704 * 481 + 352 * 241])
    assert (y.shape, u.shape, v.shape) == ((481, 641), (241, 321), (241, 321))
    assert (u.strides, v.offset) == ((352, 1), 704 * 481 + 352 * 241)


@pytest.mark.parametrize(("fmt", "w", "h", "strides", "offsets"), [
    ("NV12", 6, 5, [8, 8], [0, 40]),
    ("RGBA", 3, 2, [16], [4]),
    ("RGB", 5, 3, [16], [0]),
    ("I420", 5, 3, [8, 4, 4], [0, 24, 32]),
])  # fmt: skip
def test_plane_layouts_views_match_reference_offsets(fmt: str, w: int, h: int, strides: list[int],
                                                     offsets: list[int]) -> None:
    layouts = plane_layouts(fmt, w, h, strides, offsets)
    data = torch.arange(frame_nbytes(layouts), dtype=torch.int64)   # value = byte offset
    for layout in layouts:
        view = _strided_view(data, layout)
        for index in torch.cartesian_prod(*(torch.arange(n) for n in layout.shape)).reshape(-1, len(layout.shape)):
            idx = tuple(int(i) for i in index)
            assert int(view[idx]) == _reference_pixel(layout, idx)


@pytest.mark.parametrize(("args", "error", "match"), [
    (("YUY2", 4, 4, [8], [0]), UnsupportedFormatError, "'YUY2' is not supported on CUDA memory"),
    (("NV12", 0, 4, [8, 8], [0, 32]), ValueError, "expected positive width and height, got 0x4"),
    (("NV12", 4, 4, [8], [0]), ValueError, "expected 2 strides and offsets, got 1 and 1"),
    (("RGBA", 4, 4, [15], [0]), ValueError, "plane 0: expected a pitch >= 16 bytes, got 15"),
    (("NV12", 5, 4, [8, 5], [0, 32]), ValueError, "plane 1: expected a pitch >= 6 bytes, got 5"),
    (("NV12", 4, 4, [8, 8], [0, -1]), ValueError, "plane 1: expected a non-negative offset, got -1"),
    (("NV12", 4, 4, [8, 8], [0, 32]), None, None),
])  # fmt: skip
def test_plane_layouts_validates(args: tuple, error: type[Exception] | None, match: str | None) -> None:
    ctx: AbstractContextManager = pytest.raises(error, match=match) if error else nullcontext()
    with ctx:
        plane_layouts(*args)


def test_frame_nbytes_is_last_byte_plus_one() -> None:
    layouts = plane_layouts("NV12", 1280, 720, [1536, 1536], [0, 1536 * 720])
    # last UV byte: offset + 359 rows * pitch + 639 pixels * 2 + 1
    assert frame_nbytes(layouts) == 1536 * 720 + 359 * 1536 + 639 * 2 + 1 + 1


# --- __cuda_array_interface__ ----------------------------------------------------------------------------------
def test_cuda_array_interface_is_version_3_at_plane_address() -> None:
    layout = PlaneLayout(4096, (360, 640, 2), (1536, 2, 1))
    cai = cuda_array_interface(0x7F0000000000, layout)
    assert cai == {"shape": (360, 640, 2), "typestr": "|u1", "data": (0x7F0000000000 + 4096, False),
                   "strides": (1536, 2, 1), "version": 3, "stream": None}
    assert CudaArrayView(cai).__cuda_array_interface__ is cai


def test_cuda_array_interface_rejects_null_pointer() -> None:
    with pytest.raises(ValueError, match="expected a device address, got NULL"):
        cuda_array_interface(0, PlaneLayout(0, (1, 1), (1, 1)))


# --- messages, import hygiene --------------------------------------------------------------------------------
def test_mismatch_message_names_contexts_and_the_fix() -> None:
    msg = mismatch_message(0x1234, 0xABCD, 1)
    assert "0x1234" in msg and "0xabcd" in msg and "cuda:1" in msg and "share_torch_context(pipeline)" in msg
    assert issubclass(CudaContextMismatchError, ConfigError)


def test_cuda_module_imports_neither_torch_nor_gi() -> None:
    code = "import inferstream.frames.cuda, sys; print('torch' in sys.modules, 'gi' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


# --- GPU ---------------------------------------------------------------------------------------------------------
@needs_gpu
def test_cuda_array_interface_views_device_memory_without_copy() -> None:
    pitch, w, h = 1536, 1280, 720
    layouts = plane_layouts("NV12", w, h, [pitch, pitch], [0, pitch * h])
    backing = torch.randint(0, 256, (frame_nbytes(layouts),), dtype=torch.uint8, device="cuda")
    for layout in layouts:
        view = torch.as_tensor(CudaArrayView(cuda_array_interface(backing.data_ptr(), layout)), device="cuda")
        assert view.data_ptr() == backing.data_ptr() + layout.offset
        assert view.stride() == layout.strides and tuple(view.shape) == layout.shape
        torch.testing.assert_close(view, _strided_view(backing, layout), rtol=0, atol=0)


def _gst_cuda_pipeline(fmt: str):  # type: ignore[no-untyped-def]
    gi = pytest.importorskip("gi")
    gi.require_version("Gst", "1.0")
    gi.require_version("GstVideo", "1.0")
    from gi.repository import Gst

    Gst.init(None)
    if Gst.ElementFactory.find("cudaconvert") is None:
        pytest.skip("GStreamer has no cudaconvert here (nvcodec without a GPU driver)")
    return Gst, Gst.parse_launch(
        f"videotestsrc num-buffers=2 ! video/x-raw,width=320,height=240 ! cudaupload ! cudaconvert "
        f"! video/x-raw(memory:CUDAMemory),format={fmt} ! tee name=t t. ! queue ! appsink name=gpu "
        f"t. ! queue ! cudadownload ! appsink name=cpu")


@needs_gpu
@pytest.mark.parametrize("fmt", ["NV12", "RGBA"])
def test_mapped_cuda_frame_match_cudadownload(fmt: str) -> None:
    Gst, pipeline = _gst_cuda_pipeline(fmt)
    from gi.repository import GstVideo

    from inferstream.frames.system import mapped_frame

    share_torch_context(pipeline.get_bus())
    pipeline.set_state(Gst.State.PLAYING)
    try:
        sg = pipeline.get_by_name("gpu").emit("try-pull-sample", 10 * Gst.SECOND)
        sc = pipeline.get_by_name("cpu").emit("try-pull-sample", 10 * Gst.SECOND)
        assert sg is not None and sc is not None
        with cuda.mapped_cuda_frame(sg.get_buffer(), GstVideo.VideoInfo.new_from_caps(sg.get_caps())) as frame:
            gpu_planes = [p.cpu() for p in frame.planes]
            assert all(p.is_cuda for p in frame.planes)
        with mapped_frame(sc.get_buffer(), GstVideo.VideoInfo.new_from_caps(sc.get_caps())) as ref:
            for g, c in zip(gpu_planes, ref.planes):
                torch.testing.assert_close(g, c, rtol=0, atol=0)
    finally:
        pipeline.set_state(Gst.State.NULL)


@needs_gpu
def test_mapped_cuda_frame_rejects_gstreamer_own_context() -> None:
    Gst, pipeline = _gst_cuda_pipeline("NV12")
    from gi.repository import GstVideo

    pipeline.set_state(Gst.State.PLAYING)   # no share_torch_context: cudaupload makes its own CUcontext
    try:
        sg = pipeline.get_by_name("gpu").emit("try-pull-sample", 10 * Gst.SECOND)
        info = GstVideo.VideoInfo.new_from_caps(sg.get_caps())
        with pytest.raises(CudaContextMismatchError, match="not torch's primary context"), \
                cuda.mapped_cuda_frame(sg.get_buffer(), info):
            pass
    finally:
        pipeline.set_state(Gst.State.NULL)
