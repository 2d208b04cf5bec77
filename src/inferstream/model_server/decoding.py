"""Decoding at the model server: a forward's outputs decoded once for every worker that asked, each worker getting
back only its frames' rows.

A worker whose model decodes with a built-in flat decoder (``models.base.FlatDecoder``, no masks) asks the server
to decode (``backends.served.ServedBackend.decode_at_server``). Its requests then carry their thresholds, and the
server decodes the rows of all the requests of a forward that share a decoder and thresholds in one call: on a GPU
one set of small kernels and host syncs per forward, on a stream of its own beside the next forward, where each
worker otherwise ran its own per batch under MPS beside the forward (BENCHMARKS.md, *what the forward shares the
GPU with*). What crosses back is a few kB of rows (``backends.served.Rows``) instead of the raw outputs.

The cost of a decoding call hardly depends on its rows (a few kernels, NMS, host syncs), so the rows of every
forward that ended while the last call ran are decoded in one call (``decode_together``). One call per forward made
the decoding thread the limit once forwards got short (the compiled model's 2 ms forwards of one worker's 8 frames):
answers came late, so requests came one at a time, each a forward of its own, and the run stayed slow.

No GStreamer here, and nothing of the serving loop: ``model_server`` groups a forward's requests (``Group``) and
answers each with what ``decode_together`` gives it.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from inferstream.backends.served import Rows

if TYPE_CHECKING:
    from collections.abc import Sequence

    import numpy as np
    import numpy.typing as npt
    import torch
    from torch import Tensor

    from inferstream.backends.base import ModelInfo
    from inferstream.detections import Detections
    from inferstream.models.base import DecodeParams, FlatDecoder


class Decoders:
    """The server's decoders, one per family and input size (a decoder may depend on the size: DETR, classifiers)."""

    def __init__(self, info: ModelInfo) -> None:
        self._info = info
        self._built: dict[tuple[str, int, int], FlatDecoder] = {}

    def get(self, family: str, output_shapes: Sequence[tuple[int, ...]], height: int, width: int) -> FlatDecoder:
        """The decoder of ``family`` for frames of ``height`` x ``width`` whose outputs have ``output_shapes``.

        Raises:
            ConfigError, UnsupportedModelError: an unknown family, or outputs not in its layout.
            ValueError: a family whose decoding stays with the worker (masks).
        """
        from inferstream.models.base import rows_only
        from inferstream.models.registry import make_decoder

        key = (family, height, width)
        if key not in self._built:
            built = make_decoder(family, output_shapes, self._info, (height, width))
            if not rows_only(built):  # masks are assembled at frame resolution, in the worker
                raise ValueError(f"model-family {family} is decoded by the worker, not by the server")
            self._built[key] = built
        return self._built[key]


@dataclass(eq=False)
class Group:
    """The requests of one forward that share a decoder and thresholds: their frames' outputs, decoded at once.

    ``jobs`` are the requests (any hashable owner) with the first row of their frames in the forward's outputs (read
    by ``take`` only) and their frame count, in the forward's order.
    """

    decoder: FlatDecoder
    params: DecodeParams
    jobs: list[tuple[Any, int, int]] = field(default_factory=list)
    outputs: list[Tensor] = field(default_factory=list)

    def take(self, outputs: Sequence[Tensor], copy: bool) -> None:
        """Keep the group's rows of the forward's ``outputs``: copied (``copy``) where the next forward overwrites
        them (a CUDA graph's outputs), else views where the rows are contiguous."""
        import torch

        spans = [(start, start + n) for _, start, n in self.jobs]
        contiguous = all(a[1] == b[0] for a, b in itertools.pairwise(spans))
        first, last = spans[0][0], spans[-1][1]
        for out in outputs:
            rows = out[first:last] if contiguous else torch.cat([out[a:b] for a, b in spans])
            self.outputs.append(rows.clone() if copy and contiguous else rows)

    def decode(self, stream: torch.cuda.Stream | None) -> dict[Any, Rows]:
        """Each job's rows (on a GPU on ``stream``, once the forward has ended: one copy to the host for the whole
        group)."""
        import contextlib

        import torch

        from inferstream.detections import to_host

        with torch.inference_mode(), torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            image_ids, rows = self.decoder.flat(self.outputs, self.params)
            host, host_ids = to_host(rows, image_ids)
        assert host_ids is not None
        return self._split(host, host_ids.numpy())

    def _split(self, host: Detections, image_ids: npt.NDArray[np.int64]) -> dict[Any, Rows]:
        """The rows of each job: frames ``[offset, offset + n)`` of the group (rows come grouped by frame)."""
        import numpy as np

        boxes, scores, labels = host.boxes_xyxy.numpy(), host.scores.numpy(), host.labels.numpy()
        angles = None if host.angles_rad is None else host.angles_rad.numpy()
        keypoints = None if host.keypoints is None else host.keypoints.numpy()
        offsets = np.cumsum([0] + [n for _, _, n in self.jobs])
        bounds = np.searchsorted(image_ids, offsets).tolist()
        out = {}
        for k, (job, _, _) in enumerate(self.jobs):
            a, b = bounds[k], bounds[k + 1]
            out[job] = Rows(image_ids[a:b] - offsets[k], boxes[a:b], scores[a:b], labels[a:b],
                            None if angles is None else angles[a:b], None if keypoints is None else keypoints[a:b])
        return out


def decode_together(groups: Sequence[Group], stream: torch.cuda.Stream | None) -> dict[Any, Rows | str]:
    """Each job's rows of ``groups`` (of one forward, or of several in the order they ended), one decoding call per
    decoder and thresholds (on a GPU on ``stream``); the jobs of a call that fails get why, as a string."""
    import contextlib

    import torch

    alike: dict[tuple[int, DecodeParams], list[Group]] = {}
    for group in groups:
        alike.setdefault((id(group.decoder), group.params), []).append(group)
    answers: dict[Any, Rows | str] = {}
    with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
        for same in alike.values():
            jobs = [job for group in same for job in group.jobs]
            try:
                one = same[0] if len(same) == 1 else Group(
                    same[0].decoder, same[0].params, jobs,
                    [torch.cat(parts) for parts in zip(*(group.outputs for group in same), strict=True)])
                answers.update(one.decode(stream))
            except Exception as exc:  # noqa: BLE001 (those jobs' workers hear why; the others get their rows)
                answers.update(dict.fromkeys((job for job, _, _ in jobs), f"decoding failed: {type(exc).__name__}: {exc}"))
    return answers


def groups_of(requests: Sequence[Any]) -> list[Group]:
    """A forward's requests (in its order: each has ``asked`` frames) that ask for decoding (``params`` and
    ``decoder`` set), grouped by decoder and thresholds."""
    groups: dict[tuple[int, DecodeParams], Group] = {}
    start = 0
    for request in requests:
        if request.params is not None and request.decoder is not None:
            key = (id(request.decoder), request.params)
            groups.setdefault(key, Group(request.decoder, request.params)).jobs.append((request, start, request.asked))
        start += request.asked
    return list(groups.values())
