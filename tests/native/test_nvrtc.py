"""NVRTC compilation (no GPU needed): the fused kernels compile for the architectures users run, and a compile
error reaches the caller with NVRTC's log, so the fallback's warning says what went wrong."""
from __future__ import annotations

import pytest

from inferstream.native import nvrtc
from inferstream.ops.letterbox_kernel import SOURCE


def _require_nvrtc() -> None:
    try:
        nvrtc._nvrtc()
    except nvrtc.KernelUnavailable as exc:
        pytest.skip(f"no NVRTC here: {exc}")


@pytest.mark.parametrize("arch", [(7, 5), (8, 6), (9, 0)])  # T4, A10/RTX 30xx, H100/H200
def test_letterbox_kernel_source_compiles_with_both_kernels(arch: tuple[int, int]) -> None:
    _require_nvrtc()
    cubin = nvrtc.compile_cubin(SOURCE, arch)
    assert cubin.startswith(b"\x7fELF")
    assert b"yuv420_letterbox_f32" in cubin and b"yuv420_letterbox_f16" in cubin  # extern "C": unmangled


def test_a_compile_error_carries_nvrtc_log() -> None:
    _require_nvrtc()
    with pytest.raises(nvrtc.KernelUnavailable, match=r"broken\.cu.*sm_90.*undefined_name"):
        nvrtc.compile_cubin('extern "C" __global__ void k(float* o) { o[0] = undefined_name; }', (9, 0), "broken.cu")
