"""pyinfer: runs a detector on every frame (batched across streams) and attaches GstAnalytics metadata.

A thin shell (R6): properties, caps, CUDA context, lifecycle, errors. Each buffer is handed to the stream's runner
(``runner.stream.StreamRunner``: mapping, inference in the batch group, metadata, tracking); the settings are
parsed by ``runner.settings``.

CUDA memory: with ``device=cuda`` the pads also offer ``video/x-raw(memory:CUDAMemory)`` (listed first, so
``nvh264dec ! pyinfer device=cuda`` negotiates it) and the frames are mapped in place on the GPU
(``frames.memory``): no pixel crosses to the host. The element answers ``gst.cuda.context`` queries with torch's
primary context, so upstream CUDA elements allocate memory torch can read. Where that path is unavailable (another
device, no GPU for torch, no GStreamer CUDA library) the CUDA caps are withdrawn from caps queries and negotiation
falls back to system memory (one INFO line says why).
"""
from __future__ import annotations

import json
import logging
import threading
from typing import TYPE_CHECKING, Any

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstBase", "1.0")
gi.require_version("GstVideo", "1.0")
from gi.repository import GObject, Gst, GstBase, GstVideo

from inferstream.backends.loader import BACKEND_CHOICES, GRAPH_MODES, PRECISIONS
from inferstream.elements import _props as props
from inferstream.elements._caps import (
    cuda_or_system_video_caps,
    is_cuda_memory,
    is_nvmm,
    video_templates,
    with_nvmm_if_available,
    without_cuda_memory,
)
from inferstream.elements._config_file import ConfigFile
from inferstream.elements._errors import post_error, post_warning
from inferstream.elements._inflight import DROPPED, OK, InFlight
from inferstream.elements._stream import stream_info_event
from inferstream.frames.nvmm import pyservicemaker_available
from inferstream.inference import PREPROCESS_MODES
from inferstream.native.gst import buffer_pts
from inferstream.native.gstlog import gst_debug
from inferstream.runner.settings import CHANNEL_ORDERS, PROCESS_MODES, RESIZE_MODES, family_choices
from inferstream.runner.swap import ModelSwap

if TYPE_CHECKING:
    from collections.abc import Callable

    from inferstream.inference import ModelStep
    from inferstream.runner.stream import StreamRunner

FAMILIES = family_choices()
SWAP_MESSAGE = "inferstream/model-swapped"


class PyInfer(GstBase.BaseTransform):  # type: ignore[misc]
    __gtype_name__ = "InferstreamPyInfer"
    __gstmetadata__ = (
        "inferstream detector",
        "Filter/Analyzer/Video",
        ("Runs a PyTorch / ONNX detector (YOLO v5u/v8/v11/26, end-to-end, OBB, RF-DETR, RT-DETR, D-FINE or your own "
         "post-processing) on each frame, batching frames across the instances of one batch-group, and attaches "
         "GstAnalytics object-detection metadata; or (process-mode=secondary) classifies the objects upstream "
         "detectors found. Buffers pass through unchanged."),
        "inferstream",
    )
    __gsttemplates__ = video_templates(with_nvmm_if_available(cuda_or_system_video_caps()))

    model = props.string("Model", "Model file (.onnx, .pt/.pth TorchScript or checkpoint, ultralytics .pt) or "
                         "package.module:factory returning a torch.nn.Module, or a model on a KServe v2 server (Triton): "
                         "grpc://host:8001/name or http://host:8000/name; settable while PLAYING (hot swap: "
                         "reads the new model while it loads, and the running one again if it fails)",
                         mutable_playing=True)
    model_family = props.choice("Model family", "Preprocessing + output decoder; auto detects it from the output "
                                "layout and the model's metadata. With postprocess set, a named family still picks "
                                "the preprocessing", FAMILIES, "auto")
    labels = props.string("Labels", "Label file (one per line) or comma-separated list; labels embedded in the "
                          "model file win")
    postprocess = props.string("Post-process", "package.module:function(outputs, params) -> list[Detections] "
                               "replacing the built-in decoder")
    confidence_threshold = props.number("Confidence threshold", "Detections scoring below this are dropped",
                                        0.25, 0.0, 1.0)
    iou_threshold = props.number("IoU threshold", "Non-maximum suppression IoU threshold", 0.45, 0.0, 1.0)
    max_detections = props.integer("Max detections", "At most this many detections per frame", 300, 1, 10000)
    classes = props.string("Classes", "Keep only these class ids (comma-separated); empty keeps all")
    input_size = props.string("Input size", "Network input N or WIDTHxHEIGHT; empty: from the model (else 640), on "
                              "the CPU as the frames' stride-multiple rectangle when the model takes any size "
                              "(yolo predict's rect: 640x480 for 4:3 video); auto-rect: that rectangle on any device")
    device = props.string("Device", "Torch device: cpu, cuda, cuda:N", "cpu")
    precision = props.choice("Precision", "Compute precision; auto is fp16 on CUDA, fp32 on CPU",
                             PRECISIONS, "auto")
    backend = props.choice("Backend", "Runtime; auto picks by file type or URL", BACKEND_CHOICES, "auto")
    trust_checkpoint = props.boolean("Trust checkpoint", "Allow full unpickling of .pt checkpoints (ultralytics "
                                     "files need it). Unpickling runs code from the file: only for files you trust",
                                     False)
    graph = props.choice("Graph", "CUDA graphs (torch runtime on CUDA): auto captures one graph per batch size "
                         "and falls back to eager when capture fails; cuda-graph makes a failed capture an error; "
                         "inductor compiles the model with torch.compile first (tens of seconds at start; fused "
                         "kernels); off runs eagerly", GRAPH_MODES, "auto")
    preprocess = props.choice("Preprocess", "Colour conversion + letterbox: exact matches videoconvert + OpenCV "
                              "bit for bit; fast converts in float, then resizes (≤ 5 levels off, far cheaper on "
                              "CUDA); resize-first resizes the YUV planes, then converts (cheapest; tens of levels "
                              "off at saturated edges); auto: fast on CUDA, exact on CPU", PREPROCESS_MODES, "auto")
    resize = props.choice("Resize", "How a frame fills the network input: letterbox keeps the aspect ratio and "
                          "pads, stretch fills it; auto: the model family's way", RESIZE_MODES,
                          "auto")
    pad_value = props.integer("Pad value", "Level (0..255) of the letterbox padding; -1: the model family's (YOLO: "
                              "114)", -1, -1, 255)
    mean = props.string("Mean", "Per-channel mean subtracted from RGB in [0, 1], e.g. 0.485,0.456,0.406; empty: the "
                        "model family's (DETR: ImageNet's, YOLO: none)")
    std = props.string("Std", "Per-channel divisor applied after the mean, e.g. 0.229,0.224,0.225; empty: the model "
                       "family's")
    channel_order = props.choice("Channel order", "Colour order of the network input; auto: the model family's "
                                 "(RGB for every built-in family)", CHANNEL_ORDERS, "auto")
    batch_size = props.integer("Batch size", "Most frames per forward pass, collected across the batch-group",
                               1, 1, 256)
    batch_group = props.string("Batch group", "Instances with the same name share one model and batch their "
                               "frames together; empty: a private group")
    max_latency = props.number("Max latency", "Longest a frame waits for its batch to fill, in milliseconds",
                               20.0, 0.0, 10000.0)
    in_flight = props.integer("In flight", "Frames of this stream pyinfer holds at once: above 1, a frame waits "
                              "in its batch while the next ones go to later batches (the streams' next batch forms "
                              "while this one is written and tracked, as with nvinfer's output thread); frames "
                              "still leave in order, skipped ones included; 1: each frame is done before the next "
                              "comes", 1, 1, 8)
    interval = props.integer("Interval", "Frames to skip between inferences, per stream (as nvinfer's interval): "
                             "0 infers every frame", 0, 0, 10000)
    stream_id = props.string("Stream id", "Name of this instance's stream, sent downstream in the sticky "
                             "inferstream/stream-info event; empty: the stream-start event's stream-id")
    source_id = props.integer("Source id", "Number of this instance's stream (as DeepStream's source_id), sent "
                              "downstream with the stream-id; -1: its position in the batch-group", -1, -1,
                              2**31 - 1)
    config_file = props.string("Config file", "nvinfer configuration file (INI .txt or YAML .yml): onnx-file, "
                               "labelfile-path, net-scale-factor, offsets, model-color-format, maintain-aspect-ratio, "
                               "class-attrs (per-class thresholds), ... fill the properties not set explicitly; one "
                               "warning lists the keys ignored")
    unique_id = props.integer("Unique id", "Producer id recorded with each detection (as nvinfer's "
                              "gie-unique-id)", 1, 0, 2**31 - 1)
    process_mode = props.choice("Process mode", "primary infers whole frames; secondary (nvinfer's process-mode=2) "
                                "classifies the objects upstream detectors wrote (a classifier model: one (B, nc) "
                                "output), one ClsMtd per object related from its ODMtd", PROCESS_MODES, "primary")
    operate_on_unique_id = props.integer("Operate on unique id", "Secondary: classify only the objects of the "
                                         "producer with this unique-id (as nvinfer's operate-on-gie-id); -1: any",
                                         -1, -1, 2**31 - 1)
    operate_on_classes = props.string("Operate on classes", "Secondary: classify only objects with these labels "
                                      "(comma-separated, e.g. person,car: GstAnalytics keeps the label, not the "
                                      "class id); empty: all")
    min_object_size = props.string("Min object size", "Secondary: skip objects smaller than WIDTHxHEIGHT (or N) "
                                   "frame pixels (as nvinfer's input-object-min-width/height); empty: no minimum")
    reinfer_interval = props.integer("Reinfer interval", "Secondary: classify a tracked object (TrackingMtd "
                                     "present, e.g. from pytracker upstream) again only after this many frames, "
                                     "re-attaching its last result in between (nvinfer's "
                                     "secondary-reinfer-interval); 0: every frame", 0, 0, 2**31 - 1)
    classifier_type = props.string("Classifier type", "Secondary: name of the attribute the label is filed under "
                                   "in DeepStream payloads (nvinfer's classifier-type, e.g. color); empty: "
                                   "classifier<unique-id>")

    @GObject.Property(type=str, nick="Statistics", flags=GObject.ParamFlags.READABLE,
                      blurb="Batching statistics of the batch-group as JSON: batches, frames, mean-fill, "
                      "mean-wait-ms, mean-infer-ms")
    def stats(self) -> str:
        return json.dumps(self._runner.group.stats.as_dict() if self._runner else {})

    def __init__(self) -> None:
        super().__init__()
        self.set_in_place(True)
        self.set_passthrough(False)
        self._info: GstVideo.VideoInfo | None = None
        self._runner: StreamRunner | None = None  # set in do_start, dropped in do_stop
        self._window: InFlight | None = None  # in-flight > 1: the frames in batches, not yet pushed
        # called with the pts of each frame as it leaves (Gst.CLOCK_TIME_NONE when unset), on the streaming
        # thread: the app's frame counter, at a fraction of a Python pad probe's cost per frame
        self.frames_out: Callable[[int], None] | None = None
        self._source_id = 0
        self._ended = False  # EOS seen (the group no longer waits for this stream's frames)
        self._swap = ModelSwap(self._load_model_step, _SwapEvents(self))
        self._showing: int | None = None  # thread setting ``model`` back to the running one (no swap for that)
        self._cuda: tuple[str, str | None] | None = None  # (device, why CUDA memory is unavailable), per device
        self._cuda_index: int | None = None
        self._told_upload = False
        self._nvinfer = ConfigFile(self)
        self._class_conf: tuple[tuple[int, float], ...] = ()  # from config-file's [class-attrs-N]
        self.connect("notify::model", self._on_model_changed)

    def _values(self) -> dict[str, Any]:
        """This element's own property values by name, for ``runner.settings``."""
        own = type(self).__gtype__
        return {p.name: self.get_property(p.name) for p in self.list_properties() if p.owner_type == own}

    # hot swap: the setter stays plain (R7); the notify handler hands the request to runner.swap -------------
    def _on_model_changed(self, *_args: object) -> None:
        if self._showing == threading.get_ident() or not self._swap.attached:
            return  # _show_running's own set; or not started: do_start loads whatever model is set then
        self._swap.request(self.model, f"{self.get_name()}-swap")

    def _load_model_step(self, model: str) -> ModelStep:
        """The swap's loader (its thread): the current settings with ``model``, loaded and warmed."""
        from inferstream.inference import load_model_step
        from inferstream.runner.settings import infer_config

        step = load_model_step(infer_config(self._values(), model, self._class_conf))
        step.warmup(self.batch_size)
        return step

    def _show_running(self, model: str) -> None:
        self._showing = threading.get_ident()
        try:
            self.set_property("model", model)
        finally:
            self._showing = None

    # lifecycle ----------------------------------------------------------------------------------------------
    def do_start(self) -> bool:
        from inferstream.batching.groups import acquire_group
        from inferstream.meta.writers import AnalyticsWriter
        from inferstream.runner.settings import infer_config, secondary_settings
        from inferstream.runner.stream import StreamRunner
        from inferstream.runner.tracking import offered_at

        try:  # settings first: a bad one must not leave a loaded model behind (no do_stop after a failed start)
            self._class_conf = self._nvinfer.apply(self.config_file)
            values = self._values()
            cfg = infer_config(values, self.model, self._class_conf)
            secondary = secondary_settings(values) if cfg.objects else None
        except Exception as exc:
            post_error(self, exc, "bad settings")
            return False
        try:
            name = self.batch_group or f"{self.get_name()}@{id(self):x}"
            member = acquire_group(name, cfg, self.batch_size, self.max_latency / 1000.0)
        except Exception as exc:  # the C boundary: report, refuse to start
            post_error(self, exc, f"cannot load model {self.model!r}")
            return False
        member.in_flight = self.in_flight
        self._source_id = self.source_id if self.source_id >= 0 else member.index
        try:
            writer: AnalyticsWriter | None = AnalyticsWriter(
                self.unique_id, warn=lambda exc, text: post_warning(self, exc, text))
        except (OSError, AttributeError) as exc:  # no GstAnalytics >= 1.26 (DeepStream 8/9 ship GStreamer 1.24)
            writer = None  # NvDs metadata needs none of it: NVMM input still works
            if not pyservicemaker_available():
                from inferstream.batching.groups import release_group

                release_group(member)
                post_error(self, exc, "GstAnalytics (GStreamer >= 1.26) is needed to write the detections")
                return False
            gst_debug(__name__, logging.WARNING,
                      f"{self.get_name()}: no usable GstAnalytics ({exc}): DeepStream (NVMM) input only")
        self._runner = StreamRunner(member, cfg.params, writer, unique_id=self.unique_id, interval=self.interval,
                                    secondary=secondary)
        self._runner.seat(offered_at(self.srcpad.get_peer()))  # a pytracker right after this element
        self._window = InFlight(self.srcpad, self.in_flight, self._leaving) if self.in_flight > 1 else None
        self._ended = False
        self._told_upload = False
        self._told_keypoints = False
        self._cuda = None
        self._cuda_index = member.group.model.backend.device.index if self._cuda_ok() else None
        self._swap.attach(member.group)
        return True

    def do_stop(self) -> bool:
        from inferstream.batching.groups import release_group

        self._swap.detach()  # cancels a swap still loading
        runner, self._runner = self._runner, None
        window, self._window = self._window, None
        if window is not None and runner is not None:
            window.discard(runner)
        if runner is not None:
            release_group(runner.member)
        return True

    def do_set_caps(self, incaps: Gst.Caps, outcaps: Gst.Caps) -> bool:
        from inferstream.frames.memory import memory_kind
        from inferstream.frames.system import frame_format

        self._info = GstVideo.VideoInfo.new_from_caps(incaps)
        cuda_memory, nvmm = is_cuda_memory(incaps), is_nvmm(incaps)
        if self._runner is None or self._info is None:
            return False
        if self._runner.writer is None and not nvmm:
            gst_debug(__name__, logging.WARNING,
                      f"{self.get_name()}: {incaps.to_string()} refused: without GstAnalytics only NVMM input")
            return False
        if cuda_memory and self._cuda_index is None:
            gst_debug(__name__, logging.WARNING, f"{self.get_name()}: CUDA-memory caps refused ({self._cuda_why()})")
            return False
        if not (cuda_memory or nvmm) and self._cuda_index is not None and not self._told_upload:
            self._told_upload = True
            gst_debug(__name__, logging.INFO,
                      f"{self.get_name()}: system-memory input with device={self._runner.group.cfg.device}: each "
                      "frame is uploaded (put a CUDA decoder or cudaupload upstream to keep pixels on the GPU)")
        self._runner.set_memory(memory_kind(cuda_memory, nvmm), frame_format(self._info), self._cuda_index)
        return True

    # CUDA memory: caps, context sharing ----------------------------------------------------------------------
    def _cuda_why(self) -> str | None:
        """Why this element cannot take CUDA memory now (None: it can); checked once per device setting."""
        from inferstream.frames.memory import cuda_memory_unavailable

        device = self._runner.group.cfg.device if self._runner is not None else self.device
        if self._cuda is None or self._cuda[0] != device:
            self._cuda = (device, cuda_memory_unavailable(device))
            if self._cuda[1] is not None and device.startswith("cuda"):
                gst_debug(__name__, logging.INFO,
                          f"{self.get_name()}: CUDA-memory input disabled ({self._cuda[1]}): negotiating system memory")
        return self._cuda[1]

    def _cuda_ok(self) -> bool:
        return self._cuda_why() is None

    def do_gst_base_transform_query(self, direction: Gst.PadDirection, query: Gst.Query) -> bool:
        """GstBaseTransform's ``query`` (PyGObject needs the qualified name: GstElement has a ``query`` too)."""
        if query.type == Gst.QueryType.CONTEXT and self._cuda_ok():
            from inferstream.frames.cuda_context import answer_context_query

            try:
                if answer_context_query(self, query, self._device_index()):
                    return True
            except Exception as exc:  # a query must not raise through C (R8); the mapping reports mismatches
                gst_debug(__name__, logging.WARNING, f"{self.get_name()}: cannot answer the CUDA context query: {exc}")
        handled: bool = GstBase.BaseTransform.do_query(self, direction, query)
        if handled and query.type == Gst.QueryType.CAPS and not self._cuda_ok():
            query.set_caps_result(without_cuda_memory(query.parse_caps_result()))
        return handled

    def do_set_context(self, context: Gst.Context) -> None:
        from inferstream.frames.cuda_context import CUDA_CONTEXT_TYPE, check_gst_context

        if context.get_context_type() == CUDA_CONTEXT_TYPE and self._cuda_ok():
            try:
                check_gst_context(context, self._device_index())
            except Exception as exc:  # CudaContextMismatchError: upstream would hand us memory torch cannot read
                post_error(self, exc, "CUDA context mismatch")
        GstBase.BaseTransform.do_set_context(self, context)

    def _device_index(self) -> int | None:
        if self._cuda_index is not None:
            return self._cuda_index
        import torch

        return torch.device(self.device).index

    def do_sink_event(self, event: Gst.Event) -> bool:
        runner = self._runner
        if runner is not None and self._window is not None and not self._let_out(runner, self._window, event):
            return False
        if runner is not None:
            if event.type == Gst.EventType.EOS and not self._ended:
                self._ended = True
                runner.group.leave_stream()
            elif event.type == Gst.EventType.FLUSH_STOP:
                runner.restart()
                if self._ended:  # a flushing seek after EOS: frames come again
                    self._ended = False
                    runner.group.rejoin_stream()
        forwarded = GstBase.BaseTransform.do_sink_event(self, event)
        if event.type == Gst.EventType.STREAM_START:
            if runner is not None:
                runner.restart()
            stream_id = self.stream_id or event.parse_stream_start() or self.get_name()
            self.srcpad.push_event(stream_info_event(stream_id, self._source_id))
        return forwarded

    def _let_out(self, runner: StreamRunner, window: InFlight, event: Gst.Event) -> bool:
        """Before a serialized event, push the frames that came before it (a refused push is downstream's to
        report); after a flush, drop them. False: a frame failed (posted), so the event is not forwarded."""
        if event.type == Gst.EventType.FLUSH_STOP:
            window.discard(runner)
        elif Gst.EventType.get_flags(event.type) & Gst.EventTypeFlags.SERIALIZED and len(window):
            try:
                window.drain(runner)
            except Exception as exc:  # the C boundary (R8)
                post_error(self, exc, "inference failed")
                return False
        return True

    # streaming ----------------------------------------------------------------------------------------------
    def do_transform_ip(self, buf: Gst.Buffer) -> Gst.FlowReturn:
        try:
            if self._runner is None:
                raise RuntimeError("not started")
            if self._window is not None:
                flow = self._window.add(self._runner, buf)  # pushed by the window, in order
                return DROPPED if flow == OK else flow
            self._runner.process(buf)
            self._leaving(buf)
        except Exception as exc:  # the one broad catch: the C boundary (R8)
            post_error(self, exc, "inference failed")
            return Gst.FlowReturn.ERROR
        return OK

    def _leaving(self, buf: Gst.Buffer) -> None:
        if self.frames_out is not None:
            self.frames_out(buffer_pts(buf))


class _SwapEvents:
    """A swap's outcomes (``runner.swap.SwapEvents``) as this element reports them: bus warnings, the
    ``inferstream/model-swapped`` element message, and the ``model`` property reading the running model."""

    __slots__ = ("element",)

    def __init__(self, element: PyInfer) -> None:
        self.element = element

    def warn(self, exc: BaseException, text: str) -> None:
        post_warning(self.element, exc, text)

    def swapped(self, old_model: str, new_model: str) -> None:
        structure = Gst.Structure.new_empty(SWAP_MESSAGE)
        structure.set_value("old-model", old_model)
        structure.set_value("new-model", new_model)
        self.element.post_message(Gst.Message.new_element(self.element, structure))

    def show_running(self, model: str) -> None:
        self.element._show_running(model)


GObject.type_register(PyInfer)
