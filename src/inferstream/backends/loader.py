"""One entry point from a model spec to a running Backend (house rule R9).

A spec is a file path or a ``package.module:factory`` (or ``path/to/file.py:factory``) naming the user's own
PyTorch code. The file suffix picks the runtime through ``_BY_SUFFIX``; each runtime module is imported only when
chosen, so a pipeline that runs ONNX never imports the torch-checkpoint machinery and vice versa, and a missing
optional runtime only fails the models that need it.

The helpers at the bottom turn the metadata ultralytics embeds in its exports (ONNX ``custom_metadata_map``,
TorchScript ``config.txt``) into ModelInfo; they live here because both runtimes read the same keys.
"""
from __future__ import annotations

import ast
import importlib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from inferstream.backends.base import ModelInfo
from inferstream.errors import ConfigError, ModelNotFoundError, UnsupportedModelError

if TYPE_CHECKING:
    import torch

    from inferstream.backends.base import Backend

# runtime name -> "module:class"; the class offers ``load(path, *, device, precision, trust_checkpoint)``.
_RUNTIMES: Final[dict[str, str]] = {
    "torch": "inferstream.backends.torch_backend:TorchBackend",
    "onnxruntime": "inferstream.backends.onnxrt:OnnxRuntimeBackend",
    "triton": "inferstream.backends.remote:TritonBackend",
}
# file suffix (lower case) -> runtime name.
_BY_SUFFIX: Final[dict[str, str]] = {
    ".onnx": "onnxruntime",
    ".pt": "torch",
    ".pth": "torch",
    ".torchscript": "torch",
}
MODEL_SUFFIXES: Final = tuple(sorted(_BY_SUFFIX))  # the model files a backend loads (the app's config checks them)
# the choices of load_backend's options, here (torch-free) so that elements and runtimes share them
BACKEND_CHOICES: Final = ("auto", *_RUNTIMES)
PRECISIONS: Final = ("auto", "fp32", "fp16")
GRAPH_MODES: Final = ("auto", "off", "cuda-graph", "inductor")
TORCH_ONLY_GRAPHS: Final = ("cuda-graph", "inductor")
# a remote inference server's model (KServe v2): the spec is a URL with one of these schemes
REMOTE_SCHEMES: Final = ("grpc", "grpcs", "http", "https")
SERVED_SCHEME: Final = "ipc"  # a model server on this machine (``inferstream.model_server``): ipc:///path.sock
# ``pkg.mod:attr`` or ``some/file.py:attr``; a spec naming an existing file is always a file, never a factory.
_FACTORY_RE: Final = re.compile(r"^(?P<module>[A-Za-z_][\w.]*|.+\.py):(?P<attr>[A-Za-z_][\w.]*)$")


def factory_spec(spec: str) -> tuple[str, str] | None:
    """(module or ``.py`` file, callable) for a spec that names a factory (``pkg.mod:make``, ``file.py:make``);
    None for a model file, or any spec naming an existing path."""
    match = _FACTORY_RE.match(spec)
    return None if match is None or Path(spec).expanduser().exists() else (match["module"], match["attr"])


def load_backend(
    spec: str,
    *,
    device: str = "cpu",
    precision: str = "auto",
    backend: str = "auto",
    trust_checkpoint: bool = False,
    graph: str = "auto",
) -> Backend:
    """Load a model and return it ready to run on ``device``.

    Args:
        spec: a model file (``.onnx`` runs on onnxruntime; ``.pt``/``.pth``/``.torchscript`` on torch), a
            factory ``package.module:callable`` / ``path/to/file.py:callable`` that returns a ``torch.nn.Module``
            or any callable taking the ``Tensor[B, 3, H, W]`` batch, a model on a KServe v2 server
            (``grpc://host:8001/name``, ``http://host:8000/name``; see ``backends.remote``), or the model of a
            model server on this machine (``ipc:///path/model.sock``; see ``backends.served``).
        device: torch device string ("cpu", "cuda", "cuda:1").
        precision: "auto" (fp16 on CUDA, fp32 on CPU), "fp32" or "fp16". An ONNX file's precision is fixed by the
            file: "auto" follows it and a contradicting explicit choice is refused.
        backend: "auto" (by suffix or URL scheme), "torch" or "onnxruntime" to force a runtime whatever the suffix
            says, "triton" for a remote server (a spec without a scheme is then ``host:port/name`` over gRPC).
        trust_checkpoint: allow full unpickling of a torch checkpoint (runs code named by the file; see
            ``torch_backend``). Needed for ultralytics ``.pt`` files.
        graph: CUDA graphs for the torch runtime on a CUDA device: "auto" (captured per batch shape for
            TorchScript archives and ultralytics checkpoints, eager when a capture fails, and for factories),
            "off", "cuda-graph" (always captured; a capture failure is an error), or "inductor" (compiled by
            ``torch.compile`` first, see ``backends.compiled``, then captured as with "auto"). On the CPU "auto"
            runs eager, "cuda-graph" is refused and "inductor" only compiles. onnxruntime and remote models refuse
            "cuda-graph" and "inductor".

    Returns:
        A Backend whose ``info`` carries what the model file says about itself.

    Raises:
        ConfigError: an unknown backend/precision/device name, or a combination that cannot work.
        ModelNotFoundError: the file does not exist or cannot be read; the factory's module or callable is missing.
        UnsupportedModelError: the file is not a model the chosen runtime can read.
        BackendInitError: the runtime (or an optional extra it needs) failed to initialise the model.
    """
    if backend not in BACKEND_CHOICES:
        raise ConfigError(f"backend={backend!r} is not one of {', '.join(BACKEND_CHOICES)}")
    if precision not in PRECISIONS:
        raise ConfigError(f"precision={precision!r} is not one of {', '.join(PRECISIONS)}")
    if graph not in GRAPH_MODES:
        raise ConfigError(f"graph={graph!r} is not one of {', '.join(GRAPH_MODES)}")
    dev = _parse_device(device)
    if graph == "cuda-graph" and dev.type != "cuda":
        raise ConfigError(f"graph=cuda-graph needs a CUDA device, got device={device!r}")
    scheme = spec.partition("://")[0].lower() if "://" in spec else ""
    if scheme == SERVED_SCHEME:  # a model server on this machine: its model, precision and graphs
        if backend != "auto":
            raise ConfigError(f"{spec!r} names a model server; use backend=auto")
        from inferstream.backends.served import load as load_served

        served: Backend = load_served(spec, device=dev)
        return served
    if scheme in REMOTE_SCHEMES or backend == "triton":
        if backend not in ("auto", "triton"):
            raise ConfigError(f"{spec!r} names a remote inference server; use backend=auto or backend=triton")
        if graph in TORCH_ONLY_GRAPHS:
            raise ConfigError(f"graph={graph} needs the torch backend; a remote model runs on its server")
        remote: Backend = _runtime_class("triton").load(spec, device=dev, precision=precision,
                                                        trust_checkpoint=trust_checkpoint)
        return remote
    path = Path(spec).expanduser()
    if factory := factory_spec(spec):
        if backend == "onnxruntime":
            raise ConfigError(f"{spec!r} is a Python factory, which only the torch backend can run; "
                              "use backend=auto or backend=torch")
        made: Backend = _runtime_class("torch").from_factory(*factory, device=dev, precision=precision, graph=graph)
        return made
    _check_readable(path)
    runtime = backend if backend != "auto" else _BY_SUFFIX.get(path.suffix.lower())
    if runtime is None:
        raise UnsupportedModelError(
            f"{path}: no backend for suffix {path.suffix!r}; known suffixes: {', '.join(MODEL_SUFFIXES)} "
            "(or force one with backend=torch|onnxruntime)")
    if runtime != "torch" and graph in TORCH_ONLY_GRAPHS:
        raise ConfigError(f"graph={graph} needs the torch backend; {path.name} runs on {runtime}")
    options = {"graph": graph} if runtime == "torch" else {}
    loaded: Backend = _runtime_class(runtime).load(path, device=dev, precision=precision,
                                                   trust_checkpoint=trust_checkpoint, **options)
    return loaded


def _runtime_class(runtime: str) -> Any:
    """Import one runtime's module on demand and return its backend class."""
    module, _, cls = _RUNTIMES[runtime].partition(":")
    return getattr(importlib.import_module(module), cls)


def _parse_device(device: str) -> torch.device:
    """Validate the device string once, here, so every backend gets a ``torch.device`` it can trust."""
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ConfigError(f"device={device!r} is not a torch device name (try 'cpu', 'cuda' or 'cuda:0')") from e
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError(f"device={device!r} but torch sees no CUDA device; use device=cpu")
        index = torch.cuda.current_device() if dev.index is None else dev.index
        if index >= torch.cuda.device_count():
            raise ConfigError(f"device={device!r} but only {torch.cuda.device_count()} CUDA device(s) exist")
        dev = torch.device("cuda", index)  # pin the index: IO binding and streams need a concrete device
    elif dev.type != "cpu":
        raise ConfigError(f"device={device!r}: only cpu and cuda devices are supported")
    return dev


def _check_readable(path: Path) -> None:
    """Fail early with the path in the message, before a runtime reports it less clearly."""
    if not path.exists():
        raise ModelNotFoundError(f"model file not found: {path} (a factory spec looks like 'package.module:fn')")
    if path.is_dir():
        raise ModelNotFoundError(f"model path is a directory, not a file: {path}")
    if not os.access(path, os.R_OK):
        raise ModelNotFoundError(f"model file is not readable (check permissions): {path}")


# --- ultralytics export metadata -> ModelInfo (shared by TorchScript config.txt and ONNX metadata) ------------


def names_tuple(names: object) -> tuple[str, ...] | None:
    """Class labels as a tuple indexed by class id.

    Args:
        names: ``{0: "person", ...}`` (int or numeric-string keys, as JSON writes them) or a list of labels.

    Returns:
        The labels in class-id order (a gap in the ids is filled with the id as text), or None when ``names`` is
        neither form.
    """
    if isinstance(names, (list, tuple)) and all(isinstance(n, str) for n in names):
        return tuple(names)
    if isinstance(names, Mapping) and names:
        try:
            by_id = {int(k): str(v) for k, v in names.items()}
        except (TypeError, ValueError):
            return None
        if min(by_id) < 0:
            return None
        return tuple(by_id.get(i, str(i)) for i in range(max(by_id) + 1))
    return None


def size_hw(imgsz: object) -> tuple[int, int] | None:
    """``640`` or ``[640, 480]`` (ultralytics writes (h, w)) as ``(h, w)``; None for anything else."""
    if isinstance(imgsz, int) and not isinstance(imgsz, bool) and imgsz > 0:
        return imgsz, imgsz
    if isinstance(imgsz, (list, tuple)) and len(imgsz) == 2 and all(isinstance(v, int) and v > 0 for v in imgsz):
        return int(imgsz[0]), int(imgsz[1])
    return None


# metadata keys whose values are Python literals; the rest (task, description...) are plain text.
_LITERAL_KEYS: Final = ("names", "imgsz", "end2end", "args", "stride", "batch", "kpt_shape", "channels")


def parse_export_metadata(raw: Mapping[str, str]) -> dict[str, object]:
    """Text metadata (ONNX ``custom_metadata_map``, a Triton model config's parameters) to Python values.

    Literal keys are parsed with ``ast.literal_eval``, never ``eval``: the text is data, not code. An unparsable
    value is dropped: better no labels than wrong ones.
    """
    meta: dict[str, object] = {}
    for key, value in raw.items():
        if key in _LITERAL_KEYS:
            try:
                meta[key] = ast.literal_eval(value)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
        else:
            meta[key] = value
    return meta


def info_from_export_metadata(
    meta: Mapping[str, object],
    *,
    input_size: tuple[int, int] | None = None,
    export_size_is_fixed: bool = False,
    static_batch: int | None = None,
    extra: Mapping[str, str] | None = None,
) -> ModelInfo:
    """Build ModelInfo from ultralytics-style export metadata (values already parsed to Python objects).

    ``input_size`` is only set when the model cannot take another size (ModelInfo's contract); the size it was
    trained or exported at is always kept as ``extra["imgsz"]`` (``"[h, w]"``), the natural default for a model
    that takes any size.

    ``end2end`` comes from the ``end2end`` key (ultralytics >= 8.4 writes it); without it, an export whose args
    say ``nms: True`` carries NMS in the graph and so emits final detections; any other ultralytics export
    (it has ``args``) is raw; a file with neither says nothing (None).

    Args:
        meta: keys such as ``names``, ``imgsz``, ``task``, ``end2end``, ``args``, ``stride``.
        input_size: (h, w) fixed by the graph itself.
        export_size_is_fixed: the metadata's ``imgsz`` is binding (e.g. a trace that baked its anchor grid).
        static_batch: batch size fixed by the graph, if any.
        extra: further string facts to keep (output names, raw metadata).

    Returns:
        The ModelInfo; ``extra`` also holds ``imgsz`` and ``stride`` when the metadata gives them.
    """
    end2end: bool | None = None
    args = meta.get("args")
    if isinstance(meta.get("end2end"), bool):
        end2end = bool(meta["end2end"])
    elif isinstance(args, Mapping):
        end2end = args.get("nms") is True
    task = meta.get("task")
    imgsz = size_hw(meta.get("imgsz"))
    facts = dict(extra or {})
    if imgsz is not None:
        facts["imgsz"] = f"[{imgsz[0]}, {imgsz[1]}]"
    if "stride" in meta:
        facts["stride"] = str(meta["stride"])
    if isinstance(kpt_shape := meta.get("kpt_shape"), (list, tuple)):  # pose models: keypoints x (x, y[, visibility])
        facts["kpt_shape"] = str(list(kpt_shape))
    description = str(meta.get("description", "")).lower()
    if meta.get("head") == "rtdetr" or "rtdetr" in description or "rt-detr" in description:
        facts["head"] = "rtdetr"  # RT-DETR's (B, K, 6) rows are normalised cx,cy,w,h: not YOLO end-to-end's
    return ModelInfo(
        input_size=input_size or (imgsz if export_size_is_fixed else None),
        names=names_tuple(meta.get("names")),
        task=task if isinstance(task, str) else None,
        end2end=end2end,
        static_batch=static_batch,
        extra=facts,
    )
