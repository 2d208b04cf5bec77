"""Instance masks and keypoints as GstAnalytics metadata, next to the ODMtds ``meta.gstanalytics`` writes.

Conventions (GStreamer 1.28):
  * masks: one INSTANCE ``SegmentationMtd`` per detection, as GStreamer's own YOLO-seg tensor decoder writes them
    (``gstyolosegtensordecoder.c``), so stock ``segmentationoverlay`` draws them: a GRAY8 buffer with a
    ``GstVideoMeta`` (stride = width), pixel values ``{0, k}`` (``k`` = the detection's row in the frame + 1, wrapped
    to 1..255; region ids ``[0, k]``), placed at the box's rounded edges at frame resolution, related
    ``RELATE_TO`` both ways with its ODMtd;
  * keypoints: one ``TensorMtd`` per detection, id quark ``inferstream/keypoints``, float32 ``(K, 3)`` row-major
    (x, y, score in frame pixels), related ``RELATE_TO`` from its ODMtd (1.28 has no keypoint Mtd: 1.30 adds one).
    GStreamer 1.26 (Debian 13) has the SegmentationMtd but no TensorMtd: there masks are written and read, keypoints
    neither (``keypoints_supported()``).
Like ``meta.gstanalytics``, every call goes through ctypes and keeps the GIL (one mask costs six calls).
"""
from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from inferstream.errors import MetaWriteError
from inferstream.native.analytics import REL_RELATE_TO, Mtd, analytics, quark
from inferstream.native.gst import bind, buffer_address, pydll

if TYPE_CHECKING:
    from gi.repository import Gst
    from torch import Tensor

    from inferstream.detections import Detections
    from inferstream.meta.gstanalytics import FrameMeta

KEYPOINTS_TENSOR_ID = "inferstream/keypoints"
"""The ``GstTensor.id`` quark of a detection's keypoints tensor."""


class _VideoMeta(ctypes.Structure):
    """The leading fields of ``GstVideoMeta`` (GstMeta, buffer, flags, format, id, size, planes, offsets, strides)."""

    _fields_ = [("meta_flags", ctypes.c_uint), ("meta_info", ctypes.c_void_p), ("buffer", ctypes.c_void_p),
                ("flags", ctypes.c_int), ("format", ctypes.c_int), ("id", ctypes.c_uint), ("width", ctypes.c_uint),
                ("height", ctypes.c_uint), ("n_planes", ctypes.c_uint), ("offset", ctypes.c_size_t * 4),
                ("stride", ctypes.c_int * 4)]


class _Tensor(ctypes.Structure):
    """``GstTensor`` up to its first dimension sizes (``dims[]`` is a flexible array)."""

    _fields_ = [("id", ctypes.c_uint), ("layout", ctypes.c_int), ("data_type", ctypes.c_int),
                ("data", ctypes.c_void_p), ("dims_order", ctypes.c_int), ("num_dims", ctypes.c_size_t),
                ("dims", ctypes.c_size_t * 2)]


@dataclass(frozen=True, slots=True)
class _Api:
    gst: ctypes.PyDLL
    video: ctypes.PyDLL
    seg_type: int
    tensor_type: int | None  # None: no GstAnalyticsTensorMtd (GStreamer 1.26)
    video_meta_api: int
    gray8: int
    instance: int
    float32: int
    row_major: int
    keypoints_id: int


@functools.cache
def _api() -> _Api:
    """Bind once (after ``Gst.init``); enum values come from the typelibs, not from copied numbers."""
    import gi

    gi.require_version("GstAnalytics", "1.0")
    gi.require_version("GstVideo", "1.0")
    from gi.repository import GstAnalytics, GstVideo

    lib = analytics().lib
    gst, video = pydll("libgstreamer-1.0.so.0"), pydll("libgstvideo-1.0.so.0")
    vp, u, i, sz = ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_size_t
    pm, pi, pu = ctypes.POINTER(Mtd), ctypes.POINTER(i), ctypes.POINTER(u)
    bind(gst, [("gst_buffer_new_allocate", vp, (vp, sz, vp)), ("gst_buffer_fill", sz, (vp, sz, vp, sz)),
               ("gst_buffer_extract", sz, (vp, sz, vp, sz)), ("gst_buffer_get_size", sz, (vp,)),
               ("gst_buffer_get_meta", vp, (vp, sz)), ("gst_mini_object_unref", None, (vp,))])
    bind(video, [("gst_buffer_add_video_meta_full", vp, (vp, i, i, u, u, u, ctypes.POINTER(sz), ctypes.POINTER(i))),
                 ("gst_video_meta_api_get_type", sz, ())])
    bind(lib, [("gst_analytics_segmentation_mtd_get_mtd_type", sz, ()),
               ("gst_analytics_relation_meta_add_segmentation_mtd", i, (vp, vp, i, sz, pu, i, i, u, u, pm)),
               ("gst_analytics_segmentation_mtd_get_mask", vp, (pm, pi, pi, pu, pu))])
    has_tensor_mtd = hasattr(lib, "gst_analytics_tensor_mtd_get_mtd_type")  # GStreamer >= 1.28
    if has_tensor_mtd:
        bind(lib, [("gst_analytics_tensor_mtd_get_mtd_type", sz, ()),
                   ("gst_analytics_relation_meta_add_tensor_mtd_simple", i,
                    (vp, u, i, vp, i, sz, ctypes.POINTER(sz), pm)),
                   ("gst_analytics_tensor_mtd_get_tensor", ctypes.POINTER(_Tensor), (pm,))])
    return _Api(gst, video, lib.gst_analytics_segmentation_mtd_get_mtd_type(),
                lib.gst_analytics_tensor_mtd_get_mtd_type() if has_tensor_mtd else None,
                video.gst_video_meta_api_get_type(),
                int(GstVideo.VideoFormat.GRAY8), int(GstAnalytics.SegmentationType.INSTANCE),
                int(GstAnalytics.TensorDataType.FLOAT32), int(GstAnalytics.TensorDimOrder.ROW_MAJOR),
                quark(KEYPOINTS_TENSOR_ID))


def keypoints_supported() -> bool:
    """Whether this GStreamer can carry keypoints: GstAnalyticsTensorMtd is new in 1.28 (1.26 has none)."""
    return _api().tensor_type is not None


def write_instances(buf: Gst.Buffer, dets: Detections, od_ids: Sequence[int]) -> None:
    """Attach ``dets``' masks and keypoints (CPU, frame pixels), each related to its ODMtd (``od_ids``, row order,
    as ``write_detections`` returned them). Does nothing for detections without either; keypoints are left out
    where ``keypoints_supported()`` is False (the caller says so)."""
    if dets.masks is None and dets.keypoints is None:
        return
    api, lib = _api(), analytics().lib
    rmeta = lib.gst_buffer_get_analytics_relation_meta(buffer_address(buf))
    if not rmeta:
        raise MetaWriteError("write_instances: the buffer has no relation meta (write_detections first)")
    if dets.masks is not None:
        _write_masks(api, rmeta, dets.masks, dets.boxes_xyxy, od_ids)
    if dets.keypoints is not None and api.tensor_type is not None:
        _write_keypoints(api, rmeta, dets.keypoints, od_ids)


def _write_masks(api: _Api, rmeta: int, masks: tuple[Tensor, ...], boxes: Tensor, od_ids: Sequence[int]) -> None:
    import numpy as np

    relate = analytics().lib.gst_analytics_relation_meta_set_relation
    add = analytics().lib.gst_analytics_relation_meta_add_segmentation_mtd
    seg = Mtd()
    origins = boxes[:, :2].round().int().tolist()
    for row, (mask, (x, y), od_id) in enumerate(zip(masks, origins, od_ids)):
        h, w = mask.shape
        k = row % 255 + 1
        data = np.ascontiguousarray(mask.numpy() * np.uint8(k))
        mbuf = api.gst.gst_buffer_new_allocate(None, h * w, None)
        if not mbuf:
            raise MetaWriteError(f"cannot allocate a {w}x{h} mask buffer")
        if h * w:
            api.gst.gst_buffer_fill(mbuf, 0, data.ctypes.data, h * w)
        offset, stride = (ctypes.c_size_t * 4)(0), (ctypes.c_int * 4)(w)
        if not api.video.gst_buffer_add_video_meta_full(mbuf, 0, api.gray8, w, h, 1, offset, stride):
            api.gst.gst_mini_object_unref(mbuf)
            raise MetaWriteError(f"cannot add a GRAY8 {w}x{h} video meta to a mask buffer")
        regions = (ctypes.c_uint * 2)(0, k)
        if not add(rmeta, mbuf, api.instance, 2, regions, x, y, w, h, ctypes.byref(seg)):  # takes the buffer
            raise MetaWriteError(f"add_segmentation_mtd failed for row {row}")
        relate(rmeta, REL_RELATE_TO, od_id, seg.id)
        relate(rmeta, REL_RELATE_TO, seg.id, od_id)


def _write_keypoints(api: _Api, rmeta: int, keypoints: Tensor, od_ids: Sequence[int]) -> None:
    import numpy as np

    relate = analytics().lib.gst_analytics_relation_meta_set_relation
    add = analytics().lib.gst_analytics_relation_meta_add_tensor_mtd_simple
    table = np.ascontiguousarray(keypoints.numpy(), dtype=np.float32)
    _, k, _ = table.shape
    dims = (ctypes.c_size_t * 2)(k, 3)
    size = k * 3 * 4
    mtd = Mtd()
    for row, od_id in enumerate(od_ids):
        data = api.gst.gst_buffer_new_allocate(None, size, None)
        if not data:
            raise MetaWriteError(f"cannot allocate a keypoints buffer of {size} bytes")
        api.gst.gst_buffer_fill(data, 0, table[row].ctypes.data, size)
        if not add(rmeta, api.keypoints_id, api.float32, data, api.row_major, 2, dims, ctypes.byref(mtd)):
            raise MetaWriteError(f"add_tensor_mtd_simple failed for the keypoints of row {row}")
        relate(rmeta, REL_RELATE_TO, od_id, mtd.id)


def with_instances(rmeta: int, meta: FrameMeta) -> FrameMeta:
    """``meta`` with the masks and keypoints related to its ODMtds (unchanged when there are none)."""
    from dataclasses import replace

    masks, keypoints = read_instances(rmeta, meta.od_ids)
    if masks is None and keypoints is None:
        return meta
    return replace(meta, dets=replace(meta.dets, masks=masks, keypoints=keypoints))


def read_instances(rmeta: int, od_ids: Sequence[int]) -> tuple[tuple[Tensor, ...] | None, Tensor | None]:
    """The masks and keypoints related to each ODMtd, as ``Detections`` holds them; ``None`` for a kind no ODMtd
    has. A mask from another writer (e.g. GStreamer's decoder, at prototype resolution) is resized, nearest, to
    its placement rectangle; any non-zero pixel is in the mask. A row without a mask gets an empty (0, 0) crop
    (e.g. a box pytracker predicted), one without a keypoints tensor zeros."""
    import torch

    from inferstream.meta.gstanalytics import _related

    api = _api()
    seg, ten = Mtd(0, rmeta), Mtd(0, rmeta)
    masks: list[Tensor | None] = []
    kpts: list[Tensor | None] = []
    for od_id in od_ids:
        masks.append(next((_read_mask(api, seg) for _ in _related(rmeta, od_id, REL_RELATE_TO, api.seg_type, seg)),
                          None))
        if api.tensor_type is not None:
            kpts.append(next((t for _ in _related(rmeta, od_id, REL_RELATE_TO, api.tensor_type, ten)
                              if (t := _read_keypoints(api, ten)) is not None), None))
    out_masks = None
    if any(m is not None for m in masks):
        out_masks = tuple(torch.zeros((0, 0), dtype=torch.uint8) if m is None else m for m in masks)
    out_kpts = None
    found = [t for t in kpts if t is not None]
    if found:
        k = found[0].shape[0]
        out_kpts = torch.stack([t if t is not None and t.shape[0] == k else torch.zeros((k, 3)) for t in kpts])
    return out_masks, out_kpts


def _read_mask(api: _Api, seg: Mtd) -> Tensor:
    import numpy as np
    import torch

    x, y, w, h = ctypes.c_int(), ctypes.c_int(), ctypes.c_uint(), ctypes.c_uint()
    lib = analytics().lib
    mbuf = lib.gst_analytics_segmentation_mtd_get_mask(ctypes.byref(seg), ctypes.byref(x), ctypes.byref(y),
                                                       ctypes.byref(w), ctypes.byref(h))
    try:
        vmeta_addr = api.gst.gst_buffer_get_meta(mbuf, api.video_meta_api)
        size = api.gst.gst_buffer_get_size(mbuf)
        raw = np.empty(size, dtype=np.uint8)
        api.gst.gst_buffer_extract(mbuf, 0, raw.ctypes.data, size)
    finally:
        api.gst.gst_mini_object_unref(mbuf)
    if vmeta_addr:
        vm = _VideoMeta.from_address(vmeta_addr)
        mw, mh, stride, offset = vm.width, vm.height, vm.stride[0] or vm.width, vm.offset[0]
    else:  # no video meta: a tightly packed mask of the placement's size
        mw, mh, stride, offset = w.value, h.value, w.value, 0
    plane = raw[offset : offset + stride * mh].reshape(mh, stride)[:, :mw] if mh and mw else np.zeros((0, 0), np.uint8)
    if (mh, mw) != (h.value, w.value) and mh and mw:  # nearest, as segmentationoverlay resamples
        rows = np.arange(h.value) * mh // max(h.value, 1)
        cols = np.arange(w.value) * mw // max(w.value, 1)
        plane = plane[rows][:, cols]
    return torch.from_numpy((plane != 0).astype(np.uint8))


def _read_keypoints(api: _Api, ten: Mtd) -> Tensor | None:
    import numpy as np
    import torch

    tensor = analytics().lib.gst_analytics_tensor_mtd_get_tensor(ctypes.byref(ten)).contents
    if tensor.id != api.keypoints_id or tensor.data_type != api.float32 or tensor.num_dims != 2 or \
            tensor.dims[1] != 3:
        return None
    k = int(tensor.dims[0])
    out = np.empty((k, 3), dtype=np.float32)
    api.gst.gst_buffer_extract(tensor.data, 0, out.ctypes.data, k * 12)
    return torch.from_numpy(out)
