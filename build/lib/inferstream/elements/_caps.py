"""Pad templates shared by the video elements."""
from __future__ import annotations

from typing import Final

import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst

from inferstream.gstcompat import structure
from inferstream.rawframe import PACKED_FORMATS, PLANAR_FORMATS

CUDA_MEMORY: Final = "memory:CUDAMemory"  # GST_CAPS_FEATURE_MEMORY_CUDA_MEMORY
CUDA_FORMATS: Final = ("NV12", "RGBA", "BGRA", "RGBx", "BGRx", "RGB")


def system_video_caps(formats: tuple[str, ...] = PACKED_FORMATS + PLANAR_FORMATS) -> Gst.Caps:
    return Gst.Caps.from_string(f"video/x-raw, format=(string){{ {', '.join(formats)} }}, "
                                "width=(int)[1, 32767], height=(int)[1, 32767], framerate=(fraction)[0/1, MAX]")


def any_video_caps() -> Gst.Caps:
    """Video in any format and memory: for elements that only read or add metadata."""
    return Gst.Caps.from_string("video/x-raw(ANY)")


def video_templates(caps: Gst.Caps) -> tuple[Gst.PadTemplate, Gst.PadTemplate]:
    return (Gst.PadTemplate.new("sink", Gst.PadDirection.SINK, Gst.PadPresence.ALWAYS, caps),
            Gst.PadTemplate.new("src", Gst.PadDirection.SRC, Gst.PadPresence.ALWAYS, caps))


def cuda_or_system_video_caps() -> Gst.Caps:
    """CUDA memory first (preferred when offered), then every system-memory format."""
    caps = Gst.Caps.from_string(f"video/x-raw({CUDA_MEMORY}), format=(string){{ {', '.join(CUDA_FORMATS)} }}, "
                                "width=(int)[1, 32767], height=(int)[1, 32767], framerate=(fraction)[0/1, MAX]")
    caps.append(system_video_caps())
    return caps


def is_cuda_memory(caps: Gst.Caps, index: int = 0) -> bool:
    features = caps.get_features(index)
    return features is not None and features.contains(CUDA_MEMORY)


def without_cuda_memory(caps: Gst.Caps) -> Gst.Caps:
    if caps.is_any():
        return caps
    out = Gst.Caps.new_empty()
    for i in range(caps.get_size()):
        if not is_cuda_memory(caps, i):
            features = caps.get_features(i)
            out.append_structure_full(structure(caps.get_structure(i)).copy(), features.copy() if features else None)
    return out


def with_nvmm_if_available(caps: Gst.Caps) -> Gst.Caps:
    """``caps`` with DeepStream's ``memory:NVMM`` RGBA/RGB first, only where pyservicemaker can be imported (the
    package is looked up, not imported); on stock GStreamer ``caps`` comes back unchanged."""
    from inferstream.frames.nvmm import NVMM_FORMATS, NVMM_MEMORY, pyservicemaker_available

    if not pyservicemaker_available():
        return caps
    out = Gst.Caps.from_string(f"video/x-raw({NVMM_MEMORY}), format=(string){{ {', '.join(NVMM_FORMATS)} }}, "
                               "width=(int)[1, 32767], height=(int)[1, 32767], framerate=(fraction)[0/1, MAX]")
    out.append(caps)
    return out


def is_nvmm(caps: Gst.Caps, index: int = 0) -> bool:
    from inferstream.frames.nvmm import NVMM_MEMORY

    features = caps.get_features(index)
    return features is not None and features.contains(NVMM_MEMORY)
