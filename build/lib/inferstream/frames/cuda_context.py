"""Context sharing between GStreamer's CUDA elements and torch: both must use torch's primary ``CUcontext``.

GStreamer's CUDA elements create their own ``CUcontext`` unless the application hands them one. Memory of another
context cannot be read by torch's kernels, so the pipeline must use torch's primary context:
``share_torch_context(pipeline | bus | element)``, or the building blocks ``torch_gst_context``,
``answer_need_context`` (bus sync handler), ``answer_context_query`` / ``check_gst_context`` (an element's query /
``do_set_context`` path). A frame from another context raises ``CudaContextMismatchError`` (in
``frames.cuda.mapped_cuda_frame``).

Nothing here imports torch or gi at module import.
"""
from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from inferstream.errors import ConfigError
from inferstream.gstcompat import structure
from inferstream.native.cuda import primary_context
from inferstream.native.gst import c_address

if TYPE_CHECKING:
    from gi.repository import Gst, GstCuda

CUDA_CONTEXT_TYPE: Final = "gst.cuda.context"  # GST_CUDA_CONTEXT_TYPE


class CudaContextMismatchError(ConfigError):
    """A CUDA buffer lives in a CUDA context other than torch's: the pipeline was not given torch's context."""


def mismatch_message(memory_ctx: int, torch_ctx: int, device: int) -> str:
    """The text of ``CudaContextMismatchError``: what is wrong and what to do."""
    return (f"CUDA buffer belongs to CUDA context {memory_ctx:#x}, not torch's primary context {torch_ctx:#x} on "
            f"cuda:{device}: torch kernels cannot read another context's memory. GStreamer's CUDA elements "
            f"(nvh264dec, cudaupload, cudaconvert, ...) create their own context unless the application shares "
            f"one: call inferstream.frames.cuda_context.share_torch_context(pipeline) before the pipeline leaves "
            f"NULL, or answer NEED_CONTEXT '{CUDA_CONTEXT_TYPE}' messages with answer_need_context() in a bus sync "
            f"handler.")


def device_index(device: int | None) -> int:
    """``device`` as an ordinal; ``None`` = torch's current device."""
    import torch

    return torch.cuda.current_device() if device is None else int(device)


# ---------------------------------------------------------------------------------------------------------------
# Context sharing
# ---------------------------------------------------------------------------------------------------------------
@functools.cache
def torch_context_handle(device: int) -> int:
    """torch's primary ``CUcontext`` on ``device`` (retained once for the life of the process).

    Args:
        device: CUDA device ordinal as torch numbers it.

    Returns:
        The ``CUcontext`` address.
    """
    import torch

    torch.cuda.init()
    return primary_context(device)


_CONTEXTS: dict[int, tuple[GstCuda.CudaContext, Gst.Context]] = {}
_CONTEXTS_LOCK = threading.Lock()


def _gst_cuda() -> Any:
    import gi

    gi.require_version("Gst", "1.0")
    gi.require_version("GstCuda", "1.0")
    from gi.repository import GstCuda

    return GstCuda


def torch_gst_context(device: int | None = None) -> Gst.Context:
    """The ``gst.cuda.context`` ``Gst.Context`` wrapping torch's primary context (one per device, cached).

    Every element given it shares one ``GstCudaContext`` object, so buffers flow between them without copies and
    torch can read them.

    Args:
        device: CUDA ordinal; ``None`` = ``torch.cuda.current_device()``.

    Raises:
        RuntimeError: GStreamer cannot load libcuda, or wrapping the context fails.
    """
    dev = device_index(device)
    with _CONTEXTS_LOCK:
        if dev not in _CONTEXTS:
            gst_cuda = _gst_cuda()
            if not gst_cuda.cuda_load_library():
                raise RuntimeError("GstCuda could not load libcuda.so.1 (no NVIDIA driver?)")
            cuda_ctx = gst_cuda.CudaContext.new_wrapped(torch_context_handle(dev), dev)
            if cuda_ctx is None:
                raise RuntimeError(f"gst_cuda_context_new_wrapped failed for torch's context on cuda:{dev}")
            _CONTEXTS[dev] = (cuda_ctx, gst_cuda.context_new_cuda_context(cuda_ctx))
        return _CONTEXTS[dev][1]


def answer_need_context(message: Gst.Message, device: int | None = None) -> bool:
    """Answer a ``NEED_CONTEXT`` message for ``gst.cuda.context`` by giving its source torch's context.

    Call it from a bus *sync* handler (the element waits for the answer on its own thread).

    Returns:
        True when the message was such a request and has been answered; False for any other message.
    """
    from gi.repository import Gst

    if message.type != Gst.MessageType.NEED_CONTEXT:
        return False
    ok, ctx_type = message.parse_context_type()
    if not ok or ctx_type != CUDA_CONTEXT_TYPE or not isinstance(message.src, Gst.Element):
        return False
    message.src.set_context(torch_gst_context(device))
    return True


def need_context_sync_handler(device: int | None = None) -> Callable[[Gst.Bus, Gst.Message], Gst.BusSyncReply]:
    """A bus sync handler that answers CUDA ``NEED_CONTEXT`` requests and passes every message on."""
    from gi.repository import Gst

    def handler(_bus: Gst.Bus, message: Gst.Message) -> Gst.BusSyncReply:
        answer_need_context(message, device)
        return Gst.BusSyncReply.PASS

    return handler


def answer_context_query(element: Gst.Element, query: Gst.Query, device: int | None = None) -> bool:
    """For an element's ``do_query``: answer a ``CONTEXT`` query for ``gst.cuda.context`` with torch's context.

    Returns:
        True when answered (return True from ``do_query``), False when the query is something else.
    """
    from gi.repository import Gst

    if query.type != Gst.QueryType.CONTEXT:
        return False
    ok, ctx_type = query.parse_context_type()
    if not ok or ctx_type != CUDA_CONTEXT_TYPE:
        return False
    dev = device_index(device)
    torch_gst_context(dev)
    return bool(_gst_cuda().cuda_handle_context_query(element, query, _CONTEXTS[dev][0]))


def check_gst_context(context: Gst.Context, device: int | None = None) -> bool:
    """For an element's ``do_set_context``: check that a ``gst.cuda.context`` it is given is torch's.

    Returns:
        True for a CUDA context wrapping torch's primary context, False for a context of another type.

    Raises:
        CudaContextMismatchError: a CUDA context other than torch's (the element would produce memory that torch
            kernels cannot read).
    """
    if context.get_context_type() != CUDA_CONTEXT_TYPE:
        return False
    dev = device_index(device)
    cuda_ctx = structure(context.get_structure()).get_value(CUDA_CONTEXT_TYPE)
    handle = c_address(cuda_ctx.get_handle()) if cuda_ctx is not None else 0
    if handle != torch_context_handle(dev):
        raise CudaContextMismatchError(mismatch_message(handle, torch_context_handle(dev), dev))
    return True


def share_torch_context(target: Gst.Element | Gst.Bus, device: int | None = None) -> Gst.Context:
    """Make GStreamer's CUDA elements use torch's primary context.

    - a ``Gst.Bin`` / ``Gst.Pipeline`` or any element: ``set_context`` (a bin passes it to its children, also to
      those added later); call before the pipeline leaves NULL.
    - a ``Gst.Bus``: installs ``need_context_sync_handler`` as its sync handler (this replaces any other sync
      handler; compose with ``answer_need_context`` to keep your own).

    Returns:
        The ``Gst.Context`` handed out.
    """
    from gi.repository import Gst

    ctx = torch_gst_context(device)
    if isinstance(target, Gst.Bus):
        target.set_sync_handler(need_context_sync_handler(device))
    elif isinstance(target, Gst.Element):
        target.set_context(ctx)
    else:
        raise TypeError(f"target: expected a Gst.Element (pipeline, bin, element) or Gst.Bus, got {type(target)}")
    return ctx
