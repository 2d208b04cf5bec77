"""meta.nvds_fields and meta._nvds_c: what nvinfer writes, from Detections, on CPU (no DeepStream SDK here).

The reference for every value is nvinfer's ``attach_metadata_detector`` (gst-nvinfer/gstnvinfer_meta_utils.cpp),
written out below as plain arithmetic; the struct offsets come from compiling ``offsetof`` against DeepStream's
``includes/nvdsmeta.h`` (x86_64, gcc): batch.frame_meta_list 96, frame.pad_index 40, frame.batch_id 44,
frame.source_id 72, frame.bInferDone 100, frame.obj_meta_list 104, sizeof(NvDsBaseMeta) 40.
"""
from __future__ import annotations

import ctypes
import itertools

import pytest
import torch

from inferstream.detections import Detections
from inferstream.meta import _nvds_c
from inferstream.meta.nvds_fields import UNTRACKED_OBJECT_ID, muxer_scale, obj_label, object_fields

LABELS = ("person", "car", "é" * 100)  # the last: 200 UTF-8 bytes


def _dets(rows: list[tuple[float, float, float, float, float, int]], angles: list[float] | None = None) -> Detections:
    t = torch.tensor(rows, dtype=torch.float64)
    return Detections(boxes_xyxy=t[:, :4].float(), scores=t[:, 4].float(), labels=t[:, 5].long(),
                      angles_rad=None if angles is None else torch.tensor(angles, dtype=torch.float32))


def test_object_fields_match_nvinfer_arithmetic() -> None:
    """A 640x360 surface under a 1280x720 muxer: every box doubles; text 10 px above, Serif 11 white on black."""
    dets = _dets([(10.5, 100.25, 50.5, 180.0, 0.9, 0), (-4.0, 3.0, 20.0, 40.0, 0.5, 1)])
    first, second = object_fields(dets, LABELS, (640, 360), (1280, 720), unique_id=7)
    assert (first.left, first.top, first.width, first.height) == (21.0, 200.5, 80.0, 159.5)
    assert (first.text_x, first.text_y) == (21, 190)  # (unsigned) left, (unsigned) (top - 10)
    assert first.class_id == 0 and first.label == first.display_text == "person"
    assert first.confidence == pytest.approx(0.9)
    assert first.unique_component_id == 7 and first.object_id == UNTRACKED_OBJECT_ID == 2**64 - 1
    assert first.border_width == 3 and first.border_color == (1.0, 0.0, 0.0, 1.0)
    assert not first.has_bg_color and first.bg_color == (0.0, 0.0, 0.0, 0.0)
    assert first.rotation_angle_deg == 0.0
    # nvinfer clamps left/top at 0 without shrinking the box; a box near the top keeps its text at y 0
    assert (second.left, second.top, second.width, second.height) == (0.0, 6.0, 48.0, 74.0)
    assert (second.text_x, second.text_y) == (0, 0)


def test_object_fields_oriented_boxes_get_degrees() -> None:
    dets = _dets([(100.0, 100.0, 200.0, 150.0, 0.8, 1)], angles=[0.5])
    (f,) = object_fields(dets, LABELS, (1280, 720), (1280, 720), unique_id=1)
    assert f.rotation_angle_deg == pytest.approx(0.5 * 57.2957795, rel=1e-6)
    assert (f.left, f.top, f.width, f.height) == (100.0, 100.0, 100.0, 50.0)  # the unrotated box


def test_object_fields_label_is_cut_to_127_bytes_display_text_is_not() -> None:
    (f,) = object_fields(_dets([(0.0, 0.0, 10.0, 10.0, 0.9, 2)]), LABELS, (10, 10), (10, 10), unique_id=1)
    assert f.label == "é" * 63 and len(f.label.encode()) == 126  # 127 would split the 64th character
    assert f.display_text == LABELS[2]
    assert obj_label("x" * 200) == "x" * 127


def test_object_fields_rejects_a_class_outside_the_labels() -> None:
    with pytest.raises(ValueError, match="class index 5 outside the model's 3 labels"):
        object_fields(_dets([(0.0, 0.0, 1.0, 1.0, 0.9, 5)]), LABELS, (10, 10), (10, 10), unique_id=1)


def test_object_fields_of_no_detections_is_empty() -> None:
    assert object_fields(Detections.empty(), LABELS, (10, 10), (20, 20), unique_id=1) == []


def test_muxer_scale_rejects_empty_sizes() -> None:
    assert muxer_scale((640, 480), (1920, 1080)) == (3.0, 2.25)
    with pytest.raises(ValueError, match="sizes must be positive"):
        muxer_scale((0, 480), (1920, 1080))


# --- bInferDone: the header's layout, and the walker on structs in process memory ------------------------------
class _BaseMeta(ctypes.Structure):  # NvDsBaseMeta
    _fields_ = [("batch_meta", ctypes.c_void_p), ("meta_type", ctypes.c_int), ("uContext", ctypes.c_void_p),
                ("copy_func", ctypes.c_void_p), ("release_func", ctypes.c_void_p)]


class _BatchMeta(ctypes.Structure):  # NvDsBatchMeta, up to frame_meta_list
    _fields_ = [("base_meta", _BaseMeta), ("max_frames_in_batch", ctypes.c_uint),
                ("num_frames_in_batch", ctypes.c_uint), ("pools", ctypes.c_void_p * 6),
                ("frame_meta_list", ctypes.c_void_p)]


class _FrameMeta(ctypes.Structure):  # NvDsFrameMeta, up to obj_meta_list
    _fields_ = [("base_meta", _BaseMeta), ("pad_index", ctypes.c_uint), ("batch_id", ctypes.c_uint),
                ("frame_num", ctypes.c_int), ("buf_pts", ctypes.c_uint64), ("ntp_timestamp", ctypes.c_uint64),
                ("source_id", ctypes.c_uint), ("num_surfaces_per_frame", ctypes.c_int),
                ("source_frame_width", ctypes.c_uint), ("source_frame_height", ctypes.c_uint),
                ("surface_type", ctypes.c_uint), ("surface_index", ctypes.c_uint), ("num_obj_meta", ctypes.c_uint),
                ("bInferDone", ctypes.c_int), ("obj_meta_list", ctypes.c_void_p)]


class _GList(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("next", ctypes.c_void_p), ("prev", ctypes.c_void_p)]


def test_struct_offsets_are_the_headers() -> None:
    """The ctypes transcription of nvdsmeta.h gives the offsets gcc gave for the header itself."""
    assert ctypes.sizeof(_BaseMeta) == 40
    assert _BatchMeta.frame_meta_list.offset == _nvds_c.BATCH_FRAME_META_LIST == 96
    assert (_FrameMeta.pad_index.offset, _FrameMeta.source_id.offset) == (40, 72)
    assert _FrameMeta.batch_id.offset == _nvds_c.FRAME_BATCH_ID == 44
    assert _FrameMeta.bInferDone.offset == _nvds_c.FRAME_INFER_DONE == 100
    assert (_FrameMeta.obj_meta_list.offset, _GList.next.offset) == (104, _nvds_c.GLIST_NEXT)


def test_mark_infer_done_sets_only_the_inferred_frames() -> None:
    frames = [_FrameMeta(batch_id=b, pad_index=10 + b) for b in (2, 0, 1)]  # list order != batch order
    nodes = [_GList(data=ctypes.addressof(f)) for f in frames]
    for node, nxt in itertools.pairwise(nodes):
        node.next = ctypes.addressof(nxt)
    batch = _BatchMeta(frame_meta_list=ctypes.addressof(nodes[0]))
    marked = _nvds_c.mark_infer_done(ctypes.addressof(batch), {0, 2}, _nvds_c._read_ptr, _nvds_c._read_uint,
                                     _nvds_c._write_int)
    assert marked == 2
    assert {f.batch_id: f.bInferDone for f in frames} == {0: 1, 1: 0, 2: 1}
    assert [f.pad_index for f in frames] == [12, 10, 11]  # nothing else written


def test_mark_infer_done_on_an_empty_batch() -> None:
    batch = _BatchMeta()
    assert _nvds_c.mark_infer_done(ctypes.addressof(batch), {0}, _nvds_c._read_ptr, _nvds_c._read_uint,
                                   _nvds_c._write_int) == 0
