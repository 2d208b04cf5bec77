"""The runner's model step: a batch of frames in, per-frame Detections in frame pixels out (preprocess, forward,
decode, one copy to the host). No GStreamer here (R6); ``runner/`` maps the frames and writes the results."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from inferstream.errors import ConfigError, UnsupportedModelError
from inferstream.models.base import DecodeParams, PreprocessOverride, rows_only

if TYPE_CHECKING:
    import torch

    from inferstream.backends.base import Backend
    from inferstream.detections import Detections
    from inferstream.model_thread import ModelThread
    from inferstream.models.base import Decoder, Family, MaskedDecoder
    from inferstream.ops.letterbox import Letterbox
    from inferstream.rawframe import RawFrame

T = TypeVar("T")

DEFAULT_INPUT_SIZE = (640, 640)
# preprocess mode -> preprocess_batch(exact=..., resize_first=...)
_PREPROCESS = {"auto": (None, False), "exact": (True, False), "fast": (False, False), "resize-first": (False, True)}
PREPROCESS_MODES = tuple(_PREPROCESS)


@dataclass(frozen=True, slots=True)
class InferConfig:
    """Everything that decides what a ModelStep computes (read once from the element's properties)."""

    model: str
    family: str = "auto"
    labels: tuple[str, ...] | None = None
    params: DecodeParams = DecodeParams()
    input_size: tuple[int, int] | None = None  # (height, width); None: from the model
    rect: bool | None = None  # run at the frames' rectangle (see ModelStep.rect_stride); None: on the CPU
    device: str = "cpu"
    precision: str = "auto"
    backend: str = "auto"
    trust_checkpoint: bool = False
    postprocess: str | None = None
    graph: str = "auto"  # CUDA graphs of the torch backend: auto | off | cuda-graph | inductor (backends.loader)
    preprocess: str = "auto"  # auto | exact | fast (see ops.letterbox.preprocess_batch)
    transform: PreprocessOverride = PreprocessOverride()  # the user's changes to the family's Preprocess
    objects: bool = False  # secondary: classify object crops (inferstream.secondary) instead of whole frames

    def same_model(self, other: InferConfig) -> bool:
        """True when both would load and decode the same model (thresholds may differ)."""
        return replace(self, params=other.params) == other


class Ticket:
    """A batch handed to its model (``ModelStep.prepare``): ``result`` gives its detections, waiting for the model
    and decoding on the first call, and ``stage_s`` its preprocess, model and decode times from then on."""

    __slots__ = ("_finish", "_result", "stage_s")

    def __init__(self, finish: Callable[[], tuple[list[Detections], dict[str, float]]]) -> None:
        self._finish: Callable[[], tuple[list[Detections], dict[str, float]]] | None = finish
        self._result: list[Detections] = []
        self.stage_s: dict[str, float] = {}

    @classmethod
    def done(cls, result: list[Detections], stage_s: dict[str, float]) -> Ticket:
        """A batch already inferred and decoded."""
        ticket = cls(lambda: (result, stage_s))
        ticket.result()
        return ticket

    def result(self) -> list[Detections]:
        if self._finish is not None:
            finish, self._finish = self._finish, None
            self._result, self.stage_s = finish()
        return self._result


class ModelStep:
    """A loaded model plus its decoder; ``infer`` runs one batch of frames end to end (the batch group's model).

    The decoder is chosen from the model's real output shapes at warm-up (a dummy forward), so a wrong
    ``model-family`` or an unknown layout fails at start, not on the first frame.
    """

    def __init__(self, cfg: InferConfig, thread: ModelThread | None = None) -> None:
        from inferstream.backends.loader import load_backend

        self._thread = thread  # a CPU model's own thread (load_model_step): warmup, infer and close run there

        if cfg.preprocess not in _PREPROCESS:
            raise ConfigError(f"preprocess={cfg.preprocess!r}: expected one of {list(PREPROCESS_MODES)}")
        self.cfg = cfg
        self.backend: Backend = load_backend(cfg.model, device=cfg.device, precision=cfg.precision,
                                             backend=cfg.backend, trust_checkpoint=cfg.trust_checkpoint,
                                             graph=cfg.graph)
        info = self.backend.info
        self.input_size: tuple[int, int] = cfg.input_size or info.input_size or _family_size(cfg.family)
        if info.input_size and cfg.input_size and tuple(cfg.input_size) != tuple(info.input_size):
            raise ConfigError(f"input-size {cfg.input_size} differs from the model's fixed input {info.input_size}")
        self.labels: tuple[str, ...] = info.names or cfg.labels or ()
        self._stream = _private_stream(self.backend.device)
        # a batch decodes while the next one is prepared (a model server's submit): on a stream of its own
        self._decode_stream = _private_stream(self.backend.device) if self.lanes else None
        self.stage_s = dict.fromkeys(("preprocess", "model", "decode"), 0.0)  # the latest batch's (batching.STAGES)
        self.decoder: Decoder = self._make_decoder()
        if "classes" in getattr(self._family_spec(), "kinds", ()) and self.labels \
                and len(self.labels) != self.num_classes:
            raise ConfigError(f"{len(self.labels)} labels given but the classifier's output {self.output_shapes[0]} "
                              f"has {self.num_classes} classes")
        self.rect_stride = self._rect_stride()
        self.decodes_at_server = self._decode_at_server()
        if not self.labels:
            self.labels = tuple(f"class{i}" for i in range(self.num_classes))
        elif len(self.labels) < self.num_classes:
            raise ConfigError(f"{len(self.labels)} labels given but the model has {self.num_classes} classes")

    @property
    def lanes(self) -> int:
        """How many batches may be handed to the model (``prepare``) and not yet collected: a model server's lanes;
        0 for a model that runs each batch before ``prepare`` returns."""
        return int(getattr(self.backend, "lanes", 0)) if hasattr(self.backend, "submit") else 0

    def _make_decoder(self) -> Decoder:
        from inferstream.models.base import Preprocess
        from inferstream.models.registry import FAMILIES, detect_family, load_postprocess, make_decoder

        shapes = [tuple(t.shape) for t in self._dummy_forward(1)]
        self.output_shapes = shapes
        if self.cfg.postprocess:  # the user's decoder; a named model-family still picks the preprocessing
            self.family = "custom"
            spec = FAMILIES[self.cfg.family].preprocess if self.cfg.family in FAMILIES else Preprocess()
            self.preprocess = self.cfg.transform.apply(spec)
            self.num_classes = len(self.cfg.labels or self.backend.info.names or ()) or 1
            return load_postprocess(self.cfg.postprocess)
        self.family = detect_family(shapes, self.backend.info) if self.cfg.family == "auto" else self.cfg.family
        if self.cfg.family == "auto" and not (self.cfg.input_size or self.backend.info.input_size):
            self.input_size = _family_size(self.family)  # the detected family's own default (classifiers: 224)
        decoder = make_decoder(self.family, shapes, self.backend.info, self.input_size)
        self.preprocess = self.cfg.transform.apply(FAMILIES[self.family].preprocess)
        self.num_classes = int(getattr(decoder, "num_classes", 0)) or len(self.backend.info.names or ()) or 1
        return decoder

    def _decode_at_server(self) -> bool:
        """Whether a model server decodes this model's batches (``model_server.decoding``): its backend is a
        server's and the decoder a built-in flat one without masks (a user's postprocess runs here). The server
        decodes a whole forward's rows at once, and what crosses back is rows, not the raw outputs: on a GPU one set
        of small kernels and host syncs per forward instead of one per worker batch; on the CPU less work in all
        (BENCHMARKS.md, *Twentieth session*)."""
        ask = getattr(self.backend, "decode_at_server", None)
        if ask is None or self.family == "custom" or not rows_only(self.decoder):
            return False
        ask(self.family)
        return True

    def _family_spec(self) -> Family | None:
        from inferstream.models.registry import FAMILIES

        return FAMILIES.get(self.family)

    def _rect_stride(self) -> int | None:
        """The stride of the rectangle each batch runs at, or None: always ``input_size``.

        A rectangle (ultralytics' ``LetterBox(auto=True)``: 640x480 for 4:3 video, a quarter fewer pixels than
        640x640, and ``yolo predict``'s boxes) needs a model that takes any size (no fixed input in the file), a
        decoder that does not depend on the size, a letterbox, and no size given by the user. ``rect=None`` uses it
        on the CPU only: on CUDA every new shape is one more CUDA graph, not measured yet.

        Raises:
            ConfigError: ``rect=True`` (``input-size=auto-rect``) for a model that cannot take it.
        """
        from inferstream.models.registry import FAMILIES

        info = self.backend.info
        why = ("the model's input is fixed at {}x{}".format(*info.input_size[::-1]) if info.input_size
               else "an input-size is given" if self.cfg.input_size
               else f"model-family {self.family} decodes relative to the input size"
               if not (self.family in FAMILIES and FAMILIES[self.family].any_size)
               else "resize=stretch fills the input" if self.preprocess.resize != "letterbox" else None)
        if self.cfg.rect and why:
            raise ConfigError(f"input-size=auto-rect: not for this model, {why}")
        if why or not (self.cfg.rect or self.cfg.rect is None and self.backend.device.type == "cpu"):
            return None
        stride = info.extra.get("stride", "32")
        return int(stride) if stride.isdigit() and int(stride) > 0 else 32

    def _dummy_forward(self, batch: int) -> list[torch.Tensor]:
        import torch

        h, w = self.input_size
        x = torch.zeros((batch, 3, h, w), dtype=self.backend.dtype, device=self.backend.device)
        try:
            return self.backend(x)
        except Exception as exc:  # the model itself rejects the input: say which input we tried
            raise UnsupportedModelError(f"the model failed on a {tuple(x.shape)} {x.dtype} input: {exc}") from exc

    def warmup(self, batch_size: int) -> None:
        """Warm the backend up for ``batch_size``, then run a blank batch through the whole step: the first resize
        and the decoder's first call import OpenCV and torchvision (its NMS), which would otherwise stall the first
        batch by seconds."""
        self._on_thread(lambda: self.backend.warmup(batch_size, self.input_size))
        self.infer(self._blank_batch())

    def _blank_batch(self) -> list[Any]:
        """One black frame at twice the input's size: resized, as real frames are."""
        import torch

        from inferstream.rawframe import RawFrame

        height, width = 2 * self.input_size[0], 2 * self.input_size[1]
        return [RawFrame("RGB", width, height, (torch.zeros((height, width, 3), dtype=torch.uint8),))]

    def infer(self, frames: list[RawFrame], params: DecodeParams | None = None) -> list[Detections]:
        """Detections (CPU tensors, frame pixels) for each frame, in order, computed on the model's thread."""
        return self.prepare(frames, params, collect=True).result()

    def prepare(self, frames: list[RawFrame], params: DecodeParams | None = None, collect: bool = False) -> Ticket:
        """Preprocess the batch and hand it to the model. A backend that runs on its own (a model server's
        ``submit``) is left running, and ``Ticket.result`` waits for it and decodes: meanwhile the next batch can
        be prepared. Any other is run and decoded now, since its outputs live only until its next call (a CUDA
        graph's static outputs). With ``collect`` the ticket is collected before this returns, in the same hop to
        a CPU model's thread, where a later ``result`` would hop there again."""

        def prepared() -> Ticket:
            ticket = self._prepare(frames, params)
            if collect:
                ticket.result()
            return ticket
        return self._on_thread(prepared)

    def _on_thread(self, fn: Callable[[], T]) -> T:
        return fn() if self._thread is None else self._thread.run(fn)

    def _prepare(self, frames: list[RawFrame], params: DecodeParams | None) -> Ticket:
        """On CUDA the batch runs on the ModelStep's own non-blocking stream: work on the legacy default stream would
        wait for, and hold up, every blocking stream in the context (GStreamer's decoders included). That stream
        first waits for the default stream, where ``frames.cuda.mapped_cuda_frame`` (on the mapping thread)
        ordered the frames after GStreamer's writes; the copy to the host at the end (or a model server's
        ``submit``, which waits for its copy of the input) then means no kernel still reads the frames when their
        mappings end. Every copy to the device or wait for it releases the GIL, and with many streaming threads
        each re-acquisition can cost milliseconds: the device sees pixels in and detections out, no more."""
        import torch

        t0 = time.monotonic()
        submit = getattr(self.backend, "submit", None)
        with torch.inference_mode(), _on_stream(self._stream):
            batch, lb = self._preprocess(frames)
            t1 = time.monotonic()
            if submit is None:
                outputs = self.backend(batch)
                t2 = time.monotonic()
                dets = self._decode(frames, params, outputs, lb)
                return Ticket.done(dets, self._record_stages(t0, t1, t2))
            if self.decodes_at_server:
                return self._served_rows(frames, params, batch, lb, t0, t1)
            collect = submit(batch)

        def finish() -> tuple[list[Detections], dict[str, float]]:
            outputs = collect()  # off the model's thread: it waits on the socket, the GIL released
            t2 = time.monotonic()

            def decode() -> list[Detections]:
                with torch.inference_mode(), _on_stream(self._decode_stream):
                    return self._decode(frames, params, outputs, lb)
            dets = self._on_thread(decode)
            return dets, self._record_stages(t0, t1, t2)
        return Ticket(finish)

    def _served_rows(self, frames: list[RawFrame], params: DecodeParams | None, batch: torch.Tensor, lb: Letterbox,
                     t0: float, t1: float) -> Ticket:
        """The batch handed to a model server that decodes it (``decodes_at_server``): what comes back are the
        rows, on the host, and only the way back to frame pixels is left here (the ``decode`` stage)."""
        from inferstream.ops.frame_rows import rows_in_frames

        collect = self.backend.submit_decoded(batch, params or self.cfg.params)  # type: ignore[attr-defined]

        def finish() -> tuple[list[Detections], dict[str, float]]:
            rows, image_ids = collect()
            t2 = time.monotonic()
            dets = self._on_thread(lambda: rows_in_frames(frames, rows, image_ids, lb))
            return dets, self._record_stages(t0, t1, t2)
        return Ticket(finish)

    def _preprocess(self, frames: list[RawFrame]) -> tuple[torch.Tensor, Letterbox]:
        """The model's input for ``frames`` and where each frame landed in it (on the current stream)."""
        from inferstream.ops.letterbox import preprocess_batch, rect_input_size

        exact, resize_first = _PREPROCESS[self.cfg.preprocess]
        spec = self.preprocess
        if exact is None and spec.resample == "float":  # the family's own predict resizes in float
            exact = False
        size = self.input_size
        if self.rect_stride:  # one shape for the batch: every frame at the scale input_size gives it
            size = rect_input_size([(f.height, f.width) for f in frames], size, self.rect_stride)
        return preprocess_batch(frames, size, self.backend.device, self.backend.dtype,
                                fit_hw=self.input_size if self.rect_stride else None, exact=exact,
                                resize_first=resize_first, stretch=spec.resize == "stretch",
                                pad_value=spec.pad_value, bgr=spec.bgr,
                                mean=spec.mean if spec.normalises else None,
                                std=spec.std if spec.normalises else None)

    def _decode(self, frames: list[RawFrame], params: DecodeParams | None, outputs: list[torch.Tensor],
                lb: Letterbox) -> list[Detections]:
        """Per frame, its detections in frame pixels (axis-aligned boxes clipped): decoded on the current stream,
        the whole batch's rows crossing to the host in one copy, and mapped back to frame pixels there."""
        import torch

        from inferstream.detections import Detections, to_host
        from inferstream.ops.frame_rows import rows_in_frames

        params = params or self.cfg.params
        coeffs = protos = None
        if rows_only(self.decoder):  # the built-in decoders without masks:
            image_ids, rows = self.decoder.flat(outputs, params)  # rows of the whole batch, split on the host
            merged, host_ids = to_host(rows, image_ids)
        elif hasattr(self.decoder, "flat_masked"):  # instance masks: assembled once the boxes are in frame pixels
            masked = cast("MaskedDecoder", self.decoder)
            image_ids, rows, coeffs = masked.flat_masked(outputs, params)
            protos = masked.split_outputs(outputs)[1]
            merged, host_ids = to_host(rows, image_ids)
        else:  # a user's postprocess: one Detections per frame
            per_frame = self.decoder(outputs, params)
            merged, _ = to_host(Detections.merge(per_frame))
            sizes = torch.tensor([len(d) for d in per_frame])
            host_ids = torch.repeat_interleave(torch.arange(len(frames)), sizes)
        assert host_ids is not None
        return rows_in_frames(frames, merged, host_ids, lb, coeffs, protos)

    def _record_stages(self, started: float, preprocessed: float, modelled: float) -> dict[str, float]:
        """This batch's preprocess, model and decode times (``time.monotonic`` marks; decode ends now), kept as the
        latest batch's and returned."""
        self.stage_s = {"preprocess": preprocessed - started, "model": modelled - preprocessed,
                        "decode": time.monotonic() - modelled}
        return self.stage_s

    def close(self) -> None:
        self._on_thread(self.backend.close)
        if self._thread is not None:
            self._thread.close()  # the thread ends, and its OpenMP pool with it


def load_model_step(cfg: InferConfig) -> ModelStep:
    """The model step ``cfg`` asks for: a ModelStep on whole frames, or (``cfg.objects``) the secondary classifier on
    the objects upstream elements detected (``secondary.ObjectClassifier``). A CPU model is loaded on, and keeps,
    a thread of its own (``model_thread``: one OpenMP pool, not one per calling thread)."""
    if cfg.objects:
        from inferstream.secondary import ObjectClassifier

        return ObjectClassifier(cfg)
    if not cfg.device.startswith("cpu"):
        return ModelStep(cfg)
    from inferstream.model_thread import ModelThread

    thread = ModelThread(f"pyinfer-model:{Path(cfg.model).name}")
    try:
        step = thread.run(lambda: ModelStep(cfg, thread))
    except BaseException:
        thread.close()
        raise
    from inferstream.backends.torch_backend import TorchBackend

    if not isinstance(step.backend, TorchBackend):
        thread.one_torch_thread()
    return step


def _family_size(family: str) -> tuple[int, int]:
    """The input size a named family defaults to (auto-detection needs a size first: the default one)."""
    from inferstream.models.registry import FAMILIES

    return FAMILIES[family].preprocess.input_size if family in FAMILIES else DEFAULT_INPUT_SIZE


def _private_stream(device: torch.device) -> torch.cuda.Stream | None:
    import torch

    return torch.cuda.Stream(device) if device.type == "cuda" else None


@contextmanager
def _on_stream(stream: torch.cuda.Stream | None) -> Iterator[None]:
    """Run the block on ``stream`` after the default stream's queued work; on an error, let the stream drain first
    (the frames' mappings end right after, and kernels queued on them must not outlive them)."""
    if stream is None:
        yield
        return
    import torch

    stream.wait_stream(torch.cuda.default_stream(stream.device))
    try:
        with torch.cuda.stream(stream):
            yield
    except BaseException:
        stream.synchronize()
        raise
