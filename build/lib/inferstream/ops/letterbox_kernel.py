"""``letterbox_float``'s YUV 4:2:0 path as one CUDA kernel per group: every output pixel in one pass.

The torch-op version converts the whole group at full resolution (gather, chroma upsampling, three affine
terms, clamp, round: about six full-resolution passes and 13 kernels) and only then resizes; on a GPU that is a
large share of the model's time (BENCHMARKS.md, *Figures from the code*). Here each
thread computes one letterboxed pixel: it converts the four source pixels its bilinear tap reads, exactly as
``letterbox_float`` defines them (chroma upsampled as there, ``color.yuv_affine``, clamped to [0, 255] and rounded
to whole levels), blends them with ``interpolate``'s half-pixel weights and writes RGB / 255 into the canvas.
The planes are read where they are, through a table of per-frame pointers and pitches passed by value: no gather
copy and no host-to-device transfer.

Same arithmetic as the torch ops in float32 (the torch path rounds intermediates to the canvas dtype when it is
fp16), so the two agree within a level; ``tests/ops/test_letterbox_kernel.py`` pins it. Used by
``letterbox_float.resize_rgb_into`` whenever the frames already live on the canvas's CUDA device; elsewhere, or
where NVRTC is missing, the torch ops run (one warning).
"""
from __future__ import annotations

import ctypes
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from inferstream.native.nvrtc import KernelUnavailable, load_kernels
from inferstream.ops.color import yuv_affine

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from inferstream.rawframe import RawFrame

_log = logging.getLogger(__name__)

MAX_FRAMES = 64
"""Frames per launch: the pointer table travels as a kernel parameter (64 frames: 2 KiB of the 4 KiB limit)."""
_BLOCK = (32, 8, 1)

SOURCE = r"""
#define MAX_FRAMES @MAX_FRAMES@
struct Planes {
    unsigned long long luma[MAX_FRAMES];
    unsigned long long chroma[MAX_FRAMES];   // NV12: the interleaved UV plane; I420: U
    unsigned long long chroma_v[MAX_FRAMES]; // I420: V (unused for NV12)
    int luma_pitch[MAX_FRAMES];
    int chroma_pitch[MAX_FRAMES];
};
struct Geometry {
    int src_w, src_h, chroma_w, chroma_h, dst_w, dst_h, interleaved;
    long long stride_n, stride_c, stride_h;  // of the output, in elements
    float ky;
    float ku[3], kv[3], bias[3];
};

// torch's area_pixel_compute_source_index + upsample_bilinear2d taps (align_corners=False)
__device__ __forceinline__ void taps(float scale, int dst, int size, int& i0, int& i1, float& frac) {
    float src = fmaxf(scale * (dst + 0.5f) - 0.5f, 0.0f);
    i0 = (int)src;
    i1 = i0 + (i0 < size - 1 ? 1 : 0);
    frac = src - i0;
}

// RGB levels (clamped, rounded) of full-resolution pixel (x, y) of frame i, as letterbox_float converts it
__device__ __forceinline__ void rgb_at(const Planes& p, const Geometry& g, int i, int x, int y, float rgb[3]) {
    const unsigned char* luma = (const unsigned char*)p.luma[i];
    float yv = luma[(long long)y * p.luma_pitch[i] + x];
    float u, v;
    const unsigned char* c = (const unsigned char*)p.chroma[i];
    const long long pitch = p.chroma_pitch[i];
    if (g.interleaved) {  // NV12: bilinear upsampling by 2 (half-pixel centres), as upsample_bilinear2d, scales 2
        int y0, y1, x0, x1;
        float fy, fx;
        taps(0.5f, y, g.chroma_h, y0, y1, fy);
        taps(0.5f, x, g.chroma_w, x0, x1, fx);
        const unsigned char* r0 = c + y0 * pitch;
        const unsigned char* r1 = c + y1 * pitch;
        float gy = 1.0f - fy, gx = 1.0f - fx;
        u = gy * (gx * r0[2 * x0] + fx * r0[2 * x1]) + fy * (gx * r1[2 * x0] + fx * r1[2 * x1]);
        v = gy * (gx * r0[2 * x0 + 1] + fx * r0[2 * x1 + 1]) + fy * (gx * r1[2 * x0 + 1] + fx * r1[2 * x1 + 1]);
    } else {  // I420: nearest, each sample over its 2x2 block (videoconvert's I420 fast path)
        long long at = min(y >> 1, g.chroma_h - 1) * pitch + min(x >> 1, g.chroma_w - 1);
        u = c[at];
        v = ((const unsigned char*)p.chroma_v[i])[at];
    }
    for (int k = 0; k < 3; ++k) {
        float level = g.bias[k] + g.ky * yv;
        level += u * g.ku[k];
        level += v * g.kv[k];
        rgb[k] = rintf(fminf(fmaxf(level, 0.0f), 255.0f));
    }
}

template <typename Store>
__device__ __forceinline__ void letterbox(const Planes& p, const Geometry& g, Store store) {
    int ox = blockIdx.x * blockDim.x + threadIdx.x, oy = blockIdx.y * blockDim.y + threadIdx.y, i = blockIdx.z;
    if (ox >= g.dst_w || oy >= g.dst_h) return;
    int x0, x1, y0, y1;
    float fx, fy;
    taps((float)g.src_w / (float)g.dst_w, ox, g.src_w, x0, x1, fx);
    taps((float)g.src_h / (float)g.dst_h, oy, g.src_h, y0, y1, fy);
    float a[3], b[3], c[3], d[3];
    rgb_at(p, g, i, x0, y0, a);
    rgb_at(p, g, i, x1, y0, b);
    rgb_at(p, g, i, x0, y1, c);
    rgb_at(p, g, i, x1, y1, d);
    float gx = 1.0f - fx, gy = 1.0f - fy;
    long long at = i * g.stride_n + oy * g.stride_h + ox;
    for (int k = 0; k < 3; ++k) {
        float level = gy * (gx * a[k] + fx * b[k]) + fy * (gx * c[k] + fx * d[k]);
        store(at + k * g.stride_c, level * (1.0f / 255.0f));
    }
}

extern "C" __global__ void yuv420_letterbox_f32(Planes p, Geometry g, float* out) {
    letterbox(p, g, [out](long long at, float v) { out[at] = v; });
}

extern "C" __global__ void yuv420_letterbox_f16(Planes p, Geometry g, unsigned short* out) {
    letterbox(p, g, [out](long long at, float v) {
        unsigned short h;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v));
        out[at] = h;
    });
}
""".replace("@MAX_FRAMES@", str(MAX_FRAMES))

_KERNEL_OF_DTYPE = {"torch.float32": "yuv420_letterbox_f32", "torch.float16": "yuv420_letterbox_f16"}


class _Planes(ctypes.Structure):
    _fields_ = [("luma", ctypes.c_uint64 * MAX_FRAMES), ("chroma", ctypes.c_uint64 * MAX_FRAMES),
                ("chroma_v", ctypes.c_uint64 * MAX_FRAMES), ("luma_pitch", ctypes.c_int * MAX_FRAMES),
                ("chroma_pitch", ctypes.c_int * MAX_FRAMES)]


class _Geometry(ctypes.Structure):
    _fields_ = [("src_w", ctypes.c_int), ("src_h", ctypes.c_int), ("chroma_w", ctypes.c_int),
                ("chroma_h", ctypes.c_int), ("dst_w", ctypes.c_int), ("dst_h", ctypes.c_int),
                ("interleaved", ctypes.c_int), ("stride_n", ctypes.c_longlong), ("stride_c", ctypes.c_longlong),
                ("stride_h", ctypes.c_longlong), ("ky", ctypes.c_float), ("ku", ctypes.c_float * 3),
                ("kv", ctypes.c_float * 3), ("bias", ctypes.c_float * 3)]


_failed: set[int] = set()  # devices where the kernel could not be built: warned once, torch ops from then on


def letterbox_yuv420_into(frames: Sequence[RawFrame], out: Tensor) -> bool:
    """Write ``letterbox_float.resize_rgb_into(frames, out)`` with the fused kernel, if it applies.

    Args:
        frames: one group (same format, size, colorimetry), NV12 or I420, checked by the caller.
        out (Tensor[G, 3, h, w]): the canvas window, float16 or float32, on a CUDA device.

    Returns:
        False (nothing written) when the kernel does not apply: planes not on ``out``'s device, a layout or dtype
        it does not read, or no NVRTC; the caller then runs the torch ops.
    """
    kernel_name = _KERNEL_OF_DTYPE.get(str(out.dtype))
    if kernel_name is None or out.device.type != "cuda" or out.stride(-1) != 1 or not _readable(frames, out.device):
        return False
    index = out.device.index if out.device.index is not None else 0
    if index in _failed:
        return False
    try:
        kernel = load_kernels(SOURCE, tuple(_KERNEL_OF_DTYPE.values()), index)[kernel_name]
    except KernelUnavailable as exc:
        _failed.add(index)
        _log.warning("fused letterbox kernel unavailable on cuda:%d, using torch ops: %s", index, exc)
        return False
    import torch

    geometry = _geometry(frames[0], out)
    stream = torch.cuda.current_stream(out.device).cuda_stream
    h, w = out.shape[-2:]
    for start in range(0, len(frames), MAX_FRAMES):
        chunk = frames[start:start + MAX_FRAMES]
        grid = ((w + _BLOCK[0] - 1) // _BLOCK[0], (h + _BLOCK[1] - 1) // _BLOCK[1], len(chunk))
        target = ctypes.c_void_p(out[start].data_ptr())
        kernel.launch(grid, _BLOCK, (_planes(chunk), geometry, target), stream)
    return True


def _readable(frames: Sequence[RawFrame], device: torch.device) -> bool:
    """Whether the kernel can read these planes as they are (``check_group`` has checked their dtype and shapes):
    on ``device``, rows contiguous (NV12's UV pairs adjacent), U and V with one pitch."""
    for f in frames:
        luma, chroma = f.planes[0], f.planes[1]
        if any(p.device != device for p in f.planes):
            return False
        if luma.stride(1) != 1 or chroma.stride(1) != (2 if f.format == "NV12" else 1):
            return False
        if f.format == "NV12" and chroma.stride(2) != 1:
            return False
        if f.format != "NV12" and f.planes[2].stride() != chroma.stride():
            return False
    return True


def _planes(frames: Sequence[RawFrame]) -> _Planes:
    planes = _Planes()
    n = len(frames)
    planes.luma[:n] = [f.planes[0].data_ptr() for f in frames]
    planes.chroma[:n] = [f.planes[1].data_ptr() for f in frames]
    if frames[0].format != "NV12":
        planes.chroma_v[:n] = [f.planes[2].data_ptr() for f in frames]
    planes.luma_pitch[:n] = [f.planes[0].stride(0) for f in frames]
    planes.chroma_pitch[:n] = [f.planes[1].stride(0) for f in frames]
    return planes


def _geometry(first: RawFrame, out: Tensor) -> _Geometry:
    m, bias = yuv_affine(first.matrix, first.full_range)
    chroma = first.planes[1]
    g = _Geometry(src_w=first.width, src_h=first.height, chroma_w=chroma.shape[1], chroma_h=chroma.shape[0],
                  dst_w=out.shape[-1], dst_h=out.shape[-2], interleaved=int(first.format == "NV12"),
                  stride_n=out.stride(0), stride_c=out.stride(1), stride_h=out.stride(2), ky=m[0][0])
    g.ku[:] = [row[1] for row in m]
    g.kv[:] = [row[2] for row in m]
    g.bias[:] = list(bias)
    return g
