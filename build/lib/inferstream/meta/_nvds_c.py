"""``NvDsFrameMeta.bInferDone`` through ctypes: pyservicemaker reads it (``inferDone``) but has no setter.

nvtracker copies ``bInferDone`` into ``NvMOTObjToTrackList.detectionDone`` (``nvtracker_proc.cpp``,
``fillMOTFrame``); a frame left at FALSE counts as one where no detector ran, so the low-level tracker only
extrapolates its existing targets from it and starts no track from our objects. nvinfer sets it to TRUE on
every frame it infers, so we do the same, on the C struct: ``gst_buffer_get_nvds_batch_meta`` (libnvdsgst_meta)
gives the ``NvDsBatchMeta*``, whose ``frame_meta_list`` (a ``GList``) holds the ``NvDsFrameMeta*``.

The offsets are those of DeepStream's ``nvdsmeta.h`` on 64-bit Linux (x86_64 and aarch64 share them), read with
``offsetof`` from the header (see ``tests/meta/test_nvds_fields.py``). The walker takes its memory accessors as
arguments so the test runs it on structs built in process memory.
"""
from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Final

from inferstream.errors import MetaWriteError

if TYPE_CHECKING:
    from gi.repository import Gst

BATCH_FRAME_META_LIST: Final = 96  # offsetof(NvDsBatchMeta, frame_meta_list)
FRAME_BATCH_ID: Final = 44  # offsetof(NvDsFrameMeta, batch_id)
FRAME_INFER_DONE: Final = 100  # offsetof(NvDsFrameMeta, bInferDone), a gboolean (int)
GLIST_NEXT: Final = 8  # GList { gpointer data; GList *next; GList *prev; }

ReadPtr = Callable[[int], int]
ReadUint = Callable[[int], int]
WriteInt = Callable[[int, int], None]


def mark_infer_done(batch_meta: int, batch_ids: Collection[int], read_ptr: ReadPtr, read_uint: ReadUint,
                    write_int: WriteInt) -> int:
    """Set ``bInferDone = TRUE`` on the frame metas of ``batch_meta`` whose ``batch_id`` is in ``batch_ids``.

    Args:
        batch_meta: address of the ``NvDsBatchMeta``.
        batch_ids: the frames that were inferred.
        read_ptr, read_uint, write_int: memory accessors (address → pointer / guint; address, value → gboolean).

    Returns:
        How many frame metas were marked.
    """
    marked, node = 0, read_ptr(batch_meta + BATCH_FRAME_META_LIST)
    while node:
        frame = read_ptr(node)
        if frame and read_uint(frame + FRAME_BATCH_ID) in batch_ids:
            write_int(frame + FRAME_INFER_DONE, 1)
            marked += 1
        node = read_ptr(node + GLIST_NEXT)
    return marked


def _read_ptr(addr: int) -> int:
    return ctypes.c_void_p.from_address(addr).value or 0


def _read_uint(addr: int) -> int:
    return ctypes.c_uint.from_address(addr).value


def _write_int(addr: int, value: int) -> None:
    ctypes.c_int.from_address(addr).value = value


@functools.cache
def _libs() -> tuple[ctypes.CDLL, ctypes.CDLL]:
    """libnvdsgst_meta / libnvds_meta (DeepStream's lib folder is on the loader path in its containers)."""
    try:
        gst_meta, meta = ctypes.CDLL("libnvdsgst_meta.so"), ctypes.CDLL("libnvds_meta.so")
    except OSError as exc:
        raise MetaWriteError(f"cannot load DeepStream's metadata libraries ({exc}): add "
                             "/opt/nvidia/deepstream/deepstream/lib to LD_LIBRARY_PATH") from None
    gst_meta.gst_buffer_get_nvds_batch_meta.restype = ctypes.c_void_p
    gst_meta.gst_buffer_get_nvds_batch_meta.argtypes = [ctypes.c_void_p]
    for name in ("nvds_acquire_meta_lock", "nvds_release_meta_lock"):
        getattr(meta, name).restype = None
        getattr(meta, name).argtypes = [ctypes.c_void_p]
    return gst_meta, meta


def set_infer_done(buf: Gst.Buffer, batch_ids: Collection[int]) -> int:
    """``bInferDone = TRUE`` on the inferred frames of ``buf``'s batch, under the batch's meta lock (as nvinfer).

    Returns:
        How many frame metas were marked (0 when the buffer has no ``NvDsBatchMeta``).

    Raises:
        MetaWriteError: DeepStream's metadata libraries do not load.
    """
    from inferstream.native.gst import buffer_address

    gst_meta, meta = _libs()
    batch = gst_meta.gst_buffer_get_nvds_batch_meta(buffer_address(buf))
    if not batch:
        return 0
    meta.nvds_acquire_meta_lock(batch)
    try:
        return mark_infer_done(batch, batch_ids, _read_ptr, _read_uint, _write_int)
    finally:
        meta.nvds_release_meta_lock(batch)
