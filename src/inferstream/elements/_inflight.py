"""pyinfer's ``in-flight`` > 1: a stream's frames handed to batches and not yet pushed, oldest first.

An in-place transform gives back each buffer before the next one comes, so a stream has one frame in the batch
group at a time, and a batch of all the streams leaves the GPU idle while it is written and tracked. With a window
of N, pyinfer keeps a frame and returns DROPPED, hands it to its batch when the stream's next buffer comes
(``StreamRunner.reserve``: only then has the base class let go of it, so that it is writable for the batch's
metadata: while the transform returns, the buffer has two references, gst-python's and the base class's, and a batch
on another thread could not write it), and pushes the oldest one itself, on its streaming thread, once N frames
are held (waiting for that one if needed) — as nvinfer pushes from its output thread. So the next batch of the same streams forms while the previous one is written and
tracked, at full size. A frame that is not batched (skipped by ``interval``, NVMM, secondary) waits in the window
too and is done (``StreamRunner.later``) just before it is pushed, after the frames before it, and before the
stream's next frame goes to a batch: a tracker sees the stream's frames in order (so a skipped frame ends the
overlap: with ``interval`` the window only lets the skipped frames wait). Frames leave in their order; every frame is pushed by this window (never by the base
class, which would flag the next one DISCONT after a DROPPED); serialized events wait until the frames before them
are out.
"""
from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import gi

gi.require_version("Gst", "1.0")
from gi.repository import Gst

DROPPED = Gst.FlowReturn.CUSTOM_SUCCESS  # GST_BASE_TRANSFORM_FLOW_DROPPED: the base class pushes nothing
OK = Gst.FlowReturn.OK  # looked up once: each lookup through gi's module costs a microsecond, several per frame

if TYPE_CHECKING:
    from inferstream.batching.slots import Pending
    from inferstream.runner.stream import StreamRunner


class InFlight:
    """Up to ``depth`` frames of one stream in the batch group at once, pushed in order through ``pad``."""

    __slots__ = ("_frames", "_kept", "depth", "leaving", "pad")

    def __init__(self, pad: Gst.Pad, depth: int, leaving: Callable[[Gst.Buffer], None]) -> None:
        """``leaving(buf)`` is called just before ``buf`` is pushed."""
        self.pad, self.depth, self.leaving = pad, depth, leaving
        self._frames: deque[tuple[Gst.Buffer, Pending | Callable[[], None]]] = deque()
        self._kept: tuple[Gst.Buffer, Callable[[], Pending]] | None = None  # the last buffer, not handed over yet

    def __len__(self) -> int:
        return len(self._frames) + (self._kept is not None)

    def add(self, runner: StreamRunner, buf: Gst.Buffer) -> Gst.FlowReturn:
        """Take ``buf`` (handed to its batch, or kept with what it takes: ``StreamRunner.later``), then push what
        is due; raises what failed for a frame that is pushed now."""
        self._hand_over()
        if not runner.next_is_batched():
            self._frames.append((buf, runner.later(buf)))
        else:
            # a frame kept with its work is tracked when it leaves: before this frame's batch may track this one
            if self._frames and callable(self._frames[-1][1]):
                flow = self._push(runner, keep=0)
                if flow != OK:
                    return flow
            self._kept = (buf, runner.reserve(buf))
        return self._push(runner, keep=self.depth - 1)

    def drain(self, runner: StreamRunner) -> Gst.FlowReturn:
        """Push every frame held (before a serialized event, at EOS)."""
        self._hand_over()
        return self._push(runner, keep=0)

    def discard(self, runner: StreamRunner) -> None:
        """Drop every frame held once its batch is done with it (a flush, a stop): nothing is pushed."""
        self._kept = None
        while self._frames:
            _, work = self._frames.popleft()
            if not callable(work):
                with contextlib.suppress(Exception):  # a failure of a frame nobody will see
                    runner.wait(work)

    def _hand_over(self) -> None:
        """Hand the kept buffer to its batch (called from the stream's next buffer or event: it is writable now)."""
        if self._kept is not None:
            buf, submit = self._kept
            self._kept = None
            self._frames.append((buf, submit()))

    def _push(self, runner: StreamRunner, keep: int) -> Gst.FlowReturn:
        """Push the oldest frames while more than ``keep`` are held, and any done ones after them."""
        while self._frames and (len(self._frames) > keep or _done(self._frames[0][1])):
            buf, work = self._frames.popleft()
            if callable(work):
                work()
            else:
                runner.wait(work)
            self.leaving(buf)
            flow = self.pad.push(buf)
            if flow != OK:
                return flow
        return OK


def _done(work: Pending | Callable[[], None]) -> bool:
    """Whether the frame can be pushed without waiting for a batch."""
    return callable(work) or work.done
