"""Run an ONNX model on onnxruntime, with torch tensors in and out.

What the model is comes from the file: input size and batch from the graph when they are fixed, class names,
task and end-to-end flag from the ``custom_metadata_map`` ultralytics writes (``parse_export_metadata``). The input dtype is the graph's, so an fp16 export gets fp16 input.

On CUDA with the CUDA execution provider, IO binding hands onnxruntime the torch tensor's device pointer and
returns its outputs through DLPack: pixels never visit the host. On CPU the torch tensor and the numpy array
share memory in both directions. A graph with a fixed batch runs larger batches in chunks of that size.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import torch
from torch import Tensor

from inferstream.backends.loader import info_from_export_metadata, parse_export_metadata
from inferstream.errors import BackendInitError, ConfigError, ModelNotFoundError, UnsupportedModelError

if TYPE_CHECKING:
    import onnxruntime as ort  # type: ignore[import-untyped]

    from inferstream.backends.base import ModelInfo

_log = logging.getLogger(__name__)

_TORCH_DTYPES: Final[dict[str, torch.dtype]] = {
    "tensor(float)": torch.float32,
    "tensor(float16)": torch.float16,
    "tensor(double)": torch.float64,
}
_NUMPY_DTYPES: Final[dict[torch.dtype, type]] = {
    torch.float32: np.float32, torch.float16: np.float16, torch.float64: np.float64,
}
# onnxruntime exception class names (onnxruntime.capi.onnxruntime_pybind11_state) that mean "not a model".
_NOT_A_MODEL: Final = frozenset({"InvalidProtobuf", "InvalidGraph", "NoModel"})
_NOT_FOUND: Final = frozenset({"NoSuchFile", "NotFound"})


class OnnxRuntimeBackend:
    """One onnxruntime InferenceSession; call it with a torch batch, get torch outputs on the same device."""

    def __init__(self, session: ort.InferenceSession, info: ModelInfo, device: torch.device,
                 dtype: torch.dtype) -> None:
        self._session: ort.InferenceSession | None = session
        self.info = info
        self.device = device
        self.dtype = dtype
        self._input_name = session.get_inputs()[0].name
        self._output_names = [o.name for o in session.get_outputs()]
        self._io_binding = device.type == "cuda" and "CUDAExecutionProvider" in session.get_providers()

    @classmethod
    def load(cls, path: Path, *, device: torch.device, precision: str = "auto",
             trust_checkpoint: bool = False) -> OnnxRuntimeBackend:
        """Open ``path`` in an InferenceSession on ``device``.

        Args:
            path: the ``.onnx`` file (already checked to exist by the loader).
            device: cpu, or cuda:N (CUDA execution provider when onnxruntime has it, else CPU with a warning).
            precision: "auto" follows the graph's input dtype; "fp32"/"fp16" must match it.
            trust_checkpoint: unused (ONNX files hold no code); accepted so every runtime has one signature.

        Raises:
            UnsupportedModelError: not an ONNX model, or not one image input in NCHW with 3 channels.
            ConfigError: the requested precision contradicts the graph's input dtype.
            BackendInitError: onnxruntime is missing or failed to initialise the model.
        """
        del trust_checkpoint
        ort_mod = _import_ort()
        session = _new_session(ort_mod, path, device)
        inputs = session.get_inputs()
        if len(inputs) != 1:
            raise UnsupportedModelError(f"{path} takes {len(inputs)} inputs ({', '.join(i.name for i in inputs)}); "
                                        "inferstream feeds one image batch")
        inp = inputs[0]
        shape = list(inp.shape)
        if len(shape) != 4 or (_static(shape[1]) and shape[1] != 3):
            raise UnsupportedModelError(f"{path}: input {inp.name!r} has shape {shape}; expected NCHW with 3 "
                                        "channels, e.g. [1, 3, 640, 640]")
        dtype = _TORCH_DTYPES.get(inp.type)
        if dtype is None:
            raise UnsupportedModelError(f"{path}: input {inp.name!r} is {inp.type}; expected float or float16 "
                                        "RGB in [0, 1]")
        wanted = {"fp32": torch.float32, "fp16": torch.float16}.get(precision)
        if wanted is not None and wanted != dtype:
            raise ConfigError(f"precision={precision} but {path.name} takes {inp.type} input; an ONNX file's "
                              "precision is fixed when it is exported: use precision=auto or re-export it")
        info = _model_info(session, shape)
        return cls(session, info, device, dtype)

    def __call__(self, batch: Tensor) -> list[Tensor]:
        """Run one batch.

        Args:
            batch (Tensor[B, 3, H, W]): float RGB in [0, 1] on ``self.device``; cast to ``self.dtype`` if needed.

        Returns:
            list[Tensor]: the graph's outputs in declaration order, on ``self.device``. With a fixed graph batch
            ``n``, dimension 0 of every output is assumed to be the batch (it is for detection exports).
        """
        session = self._session
        if session is None:
            raise BackendInitError("this backend was closed")
        if self.info.input_size is not None and tuple(batch.shape[2:]) != self.info.input_size:
            h, w = self.info.input_size
            raise ConfigError(f"the model takes {h}x{w} input, got {batch.shape[2]}x{batch.shape[3]}")
        x = batch.to(dtype=self.dtype).contiguous()
        n = self.info.static_batch
        if n is None or x.shape[0] == n:
            return self._run(session, x)
        parts = []
        for start in range(0, x.shape[0], n):
            part = x[start:start + n]
            if part.shape[0] < n:  # pad the last chunk up to the graph's batch; its extra rows are dropped below
                part = torch.cat([part, part.new_zeros((n - part.shape[0], *part.shape[1:]))])
            parts.append(self._run(session, part))
        return [torch.cat([p[i] for p in parts])[: x.shape[0]] for i in range(len(parts[0]))]

    def warmup(self, batch_size: int, input_size: tuple[int, int]) -> None:
        """One dummy run: onnxruntime allocates its arenas and picks kernels on the first call."""
        self(torch.zeros(batch_size, 3, *input_size, device=self.device, dtype=self.dtype))

    def close(self) -> None:
        """Release the session (and its device memory)."""
        self._session = None

    def _run(self, session: ort.InferenceSession, x: Tensor) -> list[Tensor]:
        return self._run_cuda(session, x) if self._io_binding else self._run_host(session, x)

    def _run_host(self, session: ort.InferenceSession, x: Tensor) -> list[Tensor]:
        """CPU path: numpy views of the torch tensor in, torch views of onnxruntime's arrays out (no copies)."""
        arr = x.detach().cpu().numpy()  # .cpu() is a no-op on CPU; a copy only on the CUDA-without-EP fallback
        outs = session.run(self._output_names, {self._input_name: arr})
        return [torch.from_numpy(np.asarray(o)).to(self.device) for o in outs]

    def _run_cuda(self, session: ort.InferenceSession, x: Tensor) -> list[Tensor]:
        """CUDA path: bind the tensor's device memory as input, take outputs back through DLPack."""
        index = self.device.index or 0
        io = session.io_binding()
        io.bind_input(name=self._input_name, device_type="cuda", device_id=index,
                      element_type=_NUMPY_DTYPES[x.dtype], shape=tuple(x.shape), buffer_ptr=x.data_ptr())
        for name in self._output_names:
            io.bind_output(name, device_type="cuda", device_id=index)
        # onnxruntime computes on its own stream: the kernels that produced x on torch's stream must be done.
        # Run() synchronises its stream before returning, so the outputs are complete for any torch stream.
        torch.cuda.current_stream(self.device).synchronize()
        session.run_with_iobinding(io)
        return [_ortvalue_to_torch(v, self.device) for v in io.get_outputs()]


def _ortvalue_to_torch(value: Any, device: torch.device) -> Tensor:
    """Zero-copy through DLPack (onnxruntime >= 1.20); older builds lack it and pay one round trip via the host."""
    if hasattr(value, "__dlpack__"):
        return torch.utils.dlpack.from_dlpack(value)
    return torch.from_numpy(value.numpy()).to(device)


def _import_ort() -> Any:
    """onnxruntime is an optional extra: say how to get it instead of a bare ImportError."""
    try:
        import onnxruntime
    except ImportError as e:
        raise BackendInitError("onnxruntime is not installed: pip install 'inferstream[onnx]' (onnxruntime-gpu "
                               "for CUDA)") from e
    return onnxruntime


def _cores() -> int:
    """The threads to use: ``OMP_NUM_THREADS`` when set (as torch does; the app gives each CPU worker its share of
    the cores so), else the CPUs this process may use (cgroup/affinity aware where the OS says so)."""
    given = os.environ.get("OMP_NUM_THREADS", "")
    if given.isdigit() and int(given) > 0:
        return int(given)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _new_session(ort_mod: Any, path: Path, device: torch.device) -> ort.InferenceSession:
    """Create the session, mapping onnxruntime's exceptions to ours."""
    opts = ort_mod.SessionOptions()
    opts.intra_op_num_threads = _cores()
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3  # errors only: provider fallbacks are reported by us, once, with a fix
    want_cuda = device.type == "cuda"
    has_cuda = "CUDAExecutionProvider" in ort_mod.get_available_providers()
    providers: list[Any] = ["CPUExecutionProvider"]
    if want_cuda and has_cuda:
        providers.insert(0, ("CUDAExecutionProvider", {"device_id": device.index or 0}))
    try:
        session = ort_mod.InferenceSession(str(path), sess_options=opts, providers=providers)
    except Exception as e:
        kind = type(e).__name__
        text = str(e).strip().splitlines()[0] if str(e).strip() else kind
        if kind in _NOT_A_MODEL:
            raise UnsupportedModelError(f"{path} is not an ONNX model onnxruntime can read (tried onnxruntime "
                                        f"{ort_mod.__version__} InferenceSession: {text})") from e
        if kind in _NOT_FOUND:
            raise ModelNotFoundError(f"onnxruntime cannot open {path}: {text}") from e
        raise BackendInitError(f"onnxruntime {ort_mod.__version__} failed to initialise {path} with "
                               f"{[p if isinstance(p, str) else p[0] for p in providers]}: {text}") from e
    if want_cuda and "CUDAExecutionProvider" not in session.get_providers():
        _log.warning("%s: onnxruntime has no working CUDAExecutionProvider (install onnxruntime-gpu matching your "
                     "CUDA); running on CPU with a host copy per batch", path.name)
    return session


def _static(dim: object) -> bool:
    return isinstance(dim, int) and dim > 0


def _model_info(session: ort.InferenceSession, shape: list[object]) -> ModelInfo:
    """ModelInfo from the graph (fixed sizes) and the metadata map (labels, task, end2end, export size)."""
    raw: dict[str, str] = dict(session.get_modelmeta().custom_metadata_map)
    meta = parse_export_metadata(raw)
    h, w = shape[2], shape[3]
    graph_hw = (int(h), int(w)) if _static(h) and _static(w) else None  # type: ignore[call-overload]
    extra = dict(raw)
    extra["input_name"] = session.get_inputs()[0].name
    extra["output_names"] = ",".join(o.name for o in session.get_outputs())
    batch = shape[0]
    return info_from_export_metadata(meta, input_size=graph_hw, extra=extra,
                                     static_batch=int(batch) if _static(batch) else None)  # type: ignore[call-overload]
