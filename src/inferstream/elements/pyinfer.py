"""pyinfer: runs a detector on every frame (batched across streams) and attaches GstAnalytics metadata.

A thin shell (R6): properties, caps, lifecycle, errors. Inference lives in inferstream.inference and
inferstream.batching; metadata writing in inferstream.meta.gstanalytics.

CUDA memory: with ``device=cuda`` the pads also offer ``video/x-raw(memory:CUDAMemory)`` (listed first, so
``nvh264dec ! pyinfer device=cuda`` negotiates it) and the frames are mapped in place on the GPU
(``frames.cuda.mapped_cuda_frames``): no pixel crosses to the host. The element answers ``gst.cuda.context``
queries with torch's primary context, so upstream CUDA elements allocate memory torch can read. Where that path
is unavailable (another device, no GPU for torch, no GStreamer CUDA library) the CUDA caps are withdrawn from caps
queries and negotiation falls back to system memory (one INFO line says why).
"""
from __future__ import annotations

import contextlib
import json
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
from inferstream.elements._config_file import ConfigFile  # noqa: E402
from inferstream.elements._errors import post_error, post_warning  # noqa: E402
from inferstream.elements._stream import stream_info_event  # noqa: E402
from inferstream.errors import ConfigError, MetaWriteError  # noqa: E402
from inferstream.frames.nvmm import pyservicemaker_available  # noqa: E402
from inferstream.inference import PREPROCESS_MODES  # noqa: E402
from inferstream.models.registry import FAMILIES as MODEL_FAMILIES  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AbstractContextManager

    from inferstream.batching import BatchGroup, FollowUp
    from inferstream.detections import Detections
    from inferstream.elements._secondary import Secondary
    from inferstream.frames.raw import RawFrame
    from inferstream.frames.system import FrameFormat
    from inferstream.inference import Detector, InferConfig
    from inferstream.models.base import DecodeParams, PreprocessOverride

FAMILIES = ("auto", *MODEL_FAMILIES)
PROCESS_MODES = ("primary", "secondary")
SWAP_MESSAGE = "inferstream/model-swapped"


def _cuda_memory_unavailable(device: str) -> str | None:
    """Why ``device`` cannot take CUDA-memory frames, or None when it can."""
    if not device.startswith("cuda"):
        return f"device={device}"
    try:
        import torch

        if not torch.cuda.is_available():
            return "torch sees no CUDA device"
        gi.require_version("GstCuda", "1.0")
        from gi.repository import GstCuda

        if not GstCuda.cuda_load_library():
            return "GStreamer's CUDA library could not load libcuda"
    except (ImportError, ValueError) as exc:
        return f"no GStreamer CUDA support ({exc})"
    return None


AUTO_RECT = "auto-rect"


def _parse_size(text: str) -> tuple[int, int] | None:
    """'640' → (640, 640); '640x384' (width x height) → (384, 640); '' or 'auto-rect' → None (from the model)."""
    if not text or text.strip().lower() == AUTO_RECT:
        return None
    try:
        w, _, h = text.lower().partition("x")
        size = (int(h or w), int(w))
    except ValueError:
        raise ConfigError(f"input-size {text!r}: expected N or WIDTHxHEIGHT, e.g. 640 or 640x384") from None
    if min(size) < 32 or max(size) > 8192:
        raise ConfigError(f"input-size {text!r}: each side must be within 32..8192")
    return size


def _labels(text: str) -> tuple[str, ...] | None:
    """parse_labels, except that a comma list too long to be a file name is a list, not an OSError."""
    from inferstream.inference import parse_labels

    try:
        return parse_labels(text)
    except OSError as exc:  # ENAMETOOLONG and the like: the text cannot name a file
        if "," not in text:
            raise ConfigError(f"labels {text[:60]!r}...: {exc.strerror or exc}") from None
        return tuple(n.strip() for n in text.split(","))


def _parse_classes(text: str) -> tuple[int, ...] | None:
    if not text:
        return None
    try:
        return tuple(int(c) for c in text.replace(";", ",").split(",") if c.strip())
    except ValueError:
        raise ConfigError(f"classes {text!r}: expected class ids separated by commas, e.g. 0,2,7") from None


class PyInfer(GstBase.BaseTransform):  # type: ignore[misc]
    __gtype_name__ = "InferstreamPyInfer"
    __gstmetadata__ = (
        "inferstream detector",
        "Filter/Analyzer/Video",
        "Runs a PyTorch / ONNX detector (YOLO v5u/v8/v11/26, end-to-end, OBB, RF-DETR, RT-DETR, D-FINE or your own "
        "post-processing) on each "
        "frame, batching frames across the instances of one batch-group, and attaches GstAnalytics "
        "object-detection metadata; or (process-mode=secondary) classifies the objects upstream detectors found. "
        "Buffers pass through unchanged.",
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
                         "off runs eagerly", GRAPH_MODES, "auto")
    preprocess = props.choice("Preprocess", "Colour conversion + letterbox: exact matches videoconvert + OpenCV "
                              "bit for bit; fast converts in float, then resizes (≤ 5 levels off, far cheaper on "
                              "CUDA); resize-first resizes the YUV planes, then converts (cheapest; tens of levels "
                              "off at saturated edges); auto: fast on CUDA, exact on CPU", PREPROCESS_MODES, "auto")
    resize = props.choice("Resize", "How a frame fills the network input: letterbox keeps the aspect ratio and "
                          "pads, stretch fills it; auto: the model family's way", ("auto", "letterbox", "stretch"),
                          "auto")
    pad_value = props.integer("Pad value", "Level (0..255) of the letterbox padding; -1: the model family's (YOLO: "
                              "114)", -1, -1, 255)
    mean = props.string("Mean", "Per-channel mean subtracted from RGB in [0, 1], e.g. 0.485,0.456,0.406; empty: the "
                        "model family's (DETR: ImageNet's, YOLO: none)")
    std = props.string("Std", "Per-channel divisor applied after the mean, e.g. 0.229,0.224,0.225; empty: the model "
                       "family's")
    channel_order = props.choice("Channel order", "Colour order of the network input; auto: the model family's "
                                 "(RGB for every built-in family)", ("auto", "rgb", "bgr"), "auto")
    batch_size = props.integer("Batch size", "Most frames per forward pass, collected across the batch-group",
                               1, 1, 256)
    batch_group = props.string("Batch group", "Instances with the same name share one model and batch their "
                               "frames together; empty: a private group")
    max_latency = props.number("Max latency", "Longest a frame waits for its batch to fill, in milliseconds",
                               20.0, 0.0, 10000.0)
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
        return json.dumps(self._group.stats.as_dict() if self._group else {})

    def __init__(self) -> None:
        super().__init__()
        self.set_in_place(True)
        self.set_passthrough(False)
        self._info: GstVideo.VideoInfo | None = None
        self._frame_format: FrameFormat | None = None  # what mapping needs, read once per caps
        self._group: BatchGroup | None = None
        self._params: DecodeParams | None = None
        self._quarks: dict[tuple[str, ...], list[int]] = {}
        self._producer: int | None = 0  # None: no GstAnalytics (NVMM input only)
        self._frame_index = 0
        self._source_id = 0
        self._skip = 0
        self._ended = False  # EOS seen (the group no longer waits for this stream's frames)
        self._swap_lock = threading.Lock()
        self._swap_generation = 0
        self._showing: int | None = None  # thread setting ``model`` back to the running one (no swap for that)
        self._cuda_memory = False  # the negotiated caps carry memory:CUDAMemory
        self._nvmm = False  # ... memory:NVMM: each buffer is an nvstreammux batch (frames.nvmm, meta.nvds)
        self._cuda: tuple[str, str | None] | None = None  # (device, why CUDA memory is unavailable), per device
        self._cuda_index: int | None = None
        self._told_upload = False
        self._told_keypoints = False  # warned that this GStreamer cannot carry keypoints (1.26)
        self._follower: tuple[Callable[[list[Any]], None], object] | None = None
        self._nvinfer = ConfigFile(self)
        self._class_conf: tuple[tuple[int, float], ...] = ()  # from config-file's [class-attrs-N]
        self._secondary: Secondary | None = None
        self.connect("notify::model", self._on_model_changed)

    def set_follower(self, run: Callable[[list[Any]], None] | None, follower: object = None) -> None:
        """Let the element linked right after this one (pytracker) do its per-frame work on the batch's thread, for
        all the batch's frames at once: once the batch's detections are written, ``run`` gets the
        ``(follower, buffer)`` of every frame whose pyinfer has the same ``run`` (``batching.FollowUp``), in batch
        order. None stops it."""
        self._follower = None if run is None else (run, follower)

    # hot swap: the setter stays plain (R7); the notify handler hands the request to a loader thread ----------
    def _on_model_changed(self, *_args: object) -> None:
        if self._group is None or self._showing == threading.get_ident():
            return  # not started: do_start loads whatever model is set then; or _show_running's own set
        with self._swap_lock:
            self._swap_generation += 1
            generation = self._swap_generation
        threading.Thread(target=self._load_and_swap, args=(generation, self.model),
                         name=f"{self.get_name()}-swap", daemon=True).start()

    def _load_and_swap(self, generation: int, model: str) -> None:
        from inferstream.inference import load_runner

        try:
            detector = load_runner(self._config(model))
            detector.warmup(self.batch_size)
        except Exception as exc:  # keep the old model running
            current = self._group.cfg.model if self._group else "?"
            post_warning(self, exc, f"model swap to {model!r} failed, still running {current!r}")
            self._show_running(generation, current)
            return
        with self._swap_lock:
            group = self._group
            if generation != self._swap_generation or group is None:
                detector.close()
                post_warning(self, ConfigError(f"superseded by model {self.model!r}"),
                             f"model swap to {model!r} cancelled")
                return
            old = group.swap(detector, self._on_rollback)
        structure = Gst.Structure.new_empty(SWAP_MESSAGE)
        structure.set_value("old-model", old.cfg.model)
        structure.set_value("new-model", model)
        self.post_message(Gst.Message.new_element(self, structure))

    def _on_rollback(self, failed: Detector, exc: BaseException) -> None:
        """The swapped-in model failed on its first real batch: the group put the old one back (batch's thread)."""
        current = self._group.cfg.model if self._group else "?"
        post_warning(self, exc, f"model {failed.cfg.model!r} failed on real frames: rolled back to {current!r}")
        self._show_running(None, current)

    def _show_running(self, generation: int | None, model: str) -> None:
        """Let ``model`` read the running model again, unless a newer swap request (``generation``) came since.
        None: from the batch's thread, which must not wait for the swap lock (a swap holds it to wait for batches)."""
        with self._swap_lock if generation is not None else contextlib.nullcontext():
            if generation is not None and generation != self._swap_generation:
                return
            self._showing = threading.get_ident()
            try:
                self.set_property("model", model)
            finally:
                self._showing = None

    # lifecycle ----------------------------------------------------------------------------------------------
    def _config(self, model: str) -> InferConfig:
        from inferstream.inference import InferConfig
        from inferstream.models.base import DecodeParams

        for name, choices in (("model-family", FAMILIES), ("precision", PRECISIONS), ("backend", BACKEND_CHOICES),
                              ("graph", GRAPH_MODES), ("preprocess", PREPROCESS_MODES),
                              ("resize", ("auto", "letterbox", "stretch")), ("channel-order", ("auto", "rgb", "bgr")),
                              ("process-mode", PROCESS_MODES)):
            if self.get_property(name) not in choices:
                raise ConfigError(f"{name}={self.get_property(name)!r}: expected one of {list(choices)}")
        if not model:
            raise ConfigError("the model property is not set")
        params = DecodeParams(conf=self.confidence_threshold, iou=self.iou_threshold, max_det=self.max_detections,
                              classes=_parse_classes(self.classes), class_conf=self._class_conf)
        return InferConfig(model=model, family=self.model_family, labels=_labels(self.labels), params=params,
                           input_size=_parse_size(self.input_size),
                           rect=True if self.input_size.strip().lower() == AUTO_RECT else None,
                           device=self.device, precision=self.precision,
                           backend=self.backend, trust_checkpoint=self.trust_checkpoint,
                           postprocess=self.postprocess or None, graph=self.graph,
                           preprocess=self.preprocess, transform=self._transform(),
                           objects=self.process_mode == "secondary")

    def _transform(self) -> PreprocessOverride:
        from inferstream.inference import parse_channel_values
        from inferstream.models.base import PreprocessOverride

        return PreprocessOverride(resize=None if self.resize == "auto" else self.resize,
                                  pad_value=None if self.pad_value < 0 else self.pad_value,
                                  mean=parse_channel_values(self.mean, "mean"),
                                  std=parse_channel_values(self.std, "std", positive=True),
                                  bgr=None if self.channel_order == "auto" else self.channel_order == "bgr")

    def do_start(self) -> bool:
        from inferstream.batching import acquire_group
        from inferstream.elements._secondary import Secondary
        from inferstream.meta._analytics_c import loops as analytics_loops
        from inferstream.meta.gstanalytics import producer_quark

        try:  # settings first: a bad one must not leave a loaded model behind (no do_stop after a failed start)
            self._class_conf = self._nvinfer.apply(self.config_file)
            cfg = self._config(self.model)
            self._secondary = Secondary.from_element(self) if cfg.objects else None
        except Exception as exc:
            post_error(self, exc, "bad settings")
            return False
        try:
            name = self.batch_group or f"{self.get_name()}@{id(self):x}"
            self._group = acquire_group(name, cfg, self.batch_size, self.max_latency / 1000.0)
            self._source_id = self.source_id if self.source_id >= 0 else self._group.members - 1
        except Exception as exc:  # the C boundary: report, refuse to start
            post_error(self, exc, f"cannot load model {self.model!r}")
            return False
        self._params = cfg.params
        try:
            self._producer = producer_quark(self.unique_id)
            analytics_loops()  # build or load the compiled metadata loops now, not while the first batch waits
        except (OSError, AttributeError) as exc:  # no GstAnalytics >= 1.26 (DeepStream 8/9 ship GStreamer 1.24)
            self._producer = None  # NvDs metadata needs none of it: NVMM input still works
            if not pyservicemaker_available():
                self.do_stop()
                post_error(self, exc, "GstAnalytics (GStreamer >= 1.26) is needed to write the detections")
                return False
            Gst.warning(f"{self.get_name()}: no usable GstAnalytics ({exc}): DeepStream (NVMM) input only")
        self._frame_index = 0
        self._ended = False
        self._skip = self.interval
        self._told_upload = False
        self._told_keypoints = False
        self._cuda = None
        self._cuda_index = self._group.detector.backend.device.index if self._cuda_ok() else None
        return True

    def do_stop(self) -> bool:
        from inferstream.batching import release_group

        with self._swap_lock:
            self._swap_generation += 1  # cancels a swap still loading
        if self._group is not None:
            release_group(self._group)
            self._group = None
        return True

    def do_set_caps(self, incaps: Gst.Caps, outcaps: Gst.Caps) -> bool:
        from inferstream.frames.system import frame_format

        self._info = GstVideo.VideoInfo.new_from_caps(incaps)
        self._cuda_memory = is_cuda_memory(incaps)
        self._nvmm = is_nvmm(incaps)
        self._frame_format = None if self._info is None else frame_format(self._info)
        if self._producer is None and not self._nvmm:
            Gst.warning(f"{self.get_name()}: {incaps.to_string()} refused: without GstAnalytics only NVMM input")
            return False
        if self._cuda_memory and self._cuda_index is None:
            Gst.warning(f"{self.get_name()}: CUDA-memory caps refused ({self._cuda_why()})")
            return False
        if not (self._cuda_memory or self._nvmm) and self._cuda_index is not None and not self._told_upload:
            self._told_upload = True
            Gst.info(f"{self.get_name()}: system-memory input with device={self._group.cfg.device}: each frame is "
                     "uploaded (put a CUDA decoder or cudaupload upstream to keep pixels on the GPU)")
        return self._info is not None

    # CUDA memory: caps, context sharing ----------------------------------------------------------------------
    def _cuda_why(self) -> str | None:
        """Why this element cannot take CUDA memory now (None: it can); checked once per device setting."""
        device = self._group.cfg.device if self._group is not None else self.device
        if self._cuda is None or self._cuda[0] != device:
            self._cuda = (device, _cuda_memory_unavailable(device))
            if self._cuda[1] is not None and device.startswith("cuda"):
                Gst.info(f"{self.get_name()}: CUDA-memory input disabled ({self._cuda[1]}): negotiating system "
                         "memory")
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
                Gst.warning(f"{self.get_name()}: cannot answer the CUDA context query: {exc}")
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
        if self._group is not None:
            if event.type == Gst.EventType.EOS and not self._ended:
                self._ended = True
                self._group.leave_stream()
            elif event.type == Gst.EventType.FLUSH_STOP:
                self._frame_index = 0
                if self._ended:  # a flushing seek after EOS: frames come again
                    self._ended = False
                    self._group.rejoin_stream()
        forwarded = GstBase.BaseTransform.do_sink_event(self, event)
        if event.type == Gst.EventType.STREAM_START:
            self._frame_index = 0
            stream_id = self.stream_id or event.parse_stream_start() or self.get_name()
            self.srcpad.push_event(stream_info_event(stream_id, self._source_id))
        return forwarded

    # streaming ----------------------------------------------------------------------------------------------
    def do_transform_ip(self, buf: Gst.Buffer) -> Gst.FlowReturn:
        index, self._frame_index = self._frame_index, self._frame_index + 1
        if self._skip and index % (self._skip + 1):
            return Gst.FlowReturn.OK
        try:
            if self._nvmm:  # a whole muxed batch: inferred at once, written as NvDsObjectMeta
                from inferstream.meta.nvds import infer_nvmm_batch

                infer_nvmm_batch(buf, lambda frames: self._group.infer_batch(frames, self._params), self.unique_id)
                return Gst.FlowReturn.OK
            if self._secondary is not None:
                self._secondary.run(self, buf, index)
            else:
                self._group.infer(_InferJob(self, buf), self._params)
        except Exception as exc:  # the one broad catch: the C boundary (R8)
            post_error(self, exc, "inference failed")
            return Gst.FlowReturn.ERROR
        return Gst.FlowReturn.OK

    def _label_quarks(self, labels: tuple[str, ...]) -> list[int]:
        quarks = self._quarks.get(labels)
        if quarks is None:
            from inferstream.meta.gstanalytics import label_quarks

            quarks = self._quarks[labels] = label_quarks(labels)
        return quarks


class _InferJob:
    """One buffer's part of a batch (``batching.FrameJob``), run by the thread that runs the batch while this
    element's streaming thread waits: map the buffer in place, write the detections onto it."""

    __slots__ = ("buf", "element")

    def __init__(self, element: PyInfer, buf: Gst.Buffer) -> None:
        self.element, self.buf = element, buf

    def frame(self) -> AbstractContextManager[RawFrame]:
        el = self.element
        if el._cuda_memory:
            from inferstream.frames.cuda import mapped_cuda_frames

            return mapped_cuda_frames(self.buf, el._frame_format, device=el._cuda_index)
        from inferstream.frames.system import mapped_frame

        return mapped_frame(self.buf, el._frame_format)

    def deliver(self, dets: Detections, detector: Detector) -> FollowUp | None:
        from inferstream.meta.gstanalytics import write_detections

        el = self.element
        ids = write_detections(self.buf, dets, el._label_quarks(detector.labels), el._producer)
        if dets.masks is not None or dets.keypoints is not None:
            from inferstream.meta.instances import keypoints_supported, write_instances

            write_instances(self.buf, dets, ids)
            if dets.keypoints is not None and not el._told_keypoints and not keypoints_supported():
                el._told_keypoints = True
                post_warning(el, MetaWriteError("no GstAnalyticsTensorMtd, new in GStreamer 1.28"),
                             f"keypoints not written on {Gst.version_string()}")
        follower = el._follower
        return None if follower is None else (follower[0], (follower[1], self.buf))


GObject.type_register(PyInfer)
