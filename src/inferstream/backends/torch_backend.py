"""Run a PyTorch model: TorchScript archives, pickled checkpoints (ultralytics ``.pt`` included) and factories.

Safety first: a pickled checkpoint is opened with ``torch.load(weights_only=True)``, which rebuilds tensors and
plain containers only. A file that needs more (ultralytics ``.pt`` files pickle their Python classes) is refused
with a ConfigError until the user sets ``trust-checkpoint=true``, because full unpickling executes whatever the
file names.

Outputs are normalised to what the model's ONNX export would emit, so one decoder serves both runtimes:
ultralytics heads are switched to export mode (``(B, 4+nc, A)`` for detect, ``(B, 300, 6)`` for end-to-end
heads, ``(output0, proto)`` for segment), and any nested tuple/list/dict of tensors is flattened in order.

CUDA graphs (``graph``): on a CUDA device the forward pass can be captured once per batch shape and replayed
(one launch instead of hundreds). ``warmup(batch_size)`` captures the
buckets 1, 2, 4, ... below ``batch_size`` and ``batch_size`` itself; a batch of n frames replays the smallest
bucket >= n, padded (the outputs are sliced back to n rows). ``auto`` captures only models whose forward is a
fixed tensor program (TorchScript archives, ultralytics checkpoints) and falls back to eager when a capture fails
(``graph_status`` says why); a factory's Python code may have side effects a replay would skip, so it runs eager
unless ``graph="cuda-graph"`` asks for capture (which then fails loudly). ``graph="inductor"`` compiles the forward
with ``torch.compile`` first (``backends.compiled``; on a CPU it only compiles), then captures it as ``auto`` does.

Memory format (``memory_format``): a convolutional module runs in ``channels_last`` (NHWC) on an x86 CPU with
oneDNN and on CUDA: oneDNN's convolutions and cuDNN's tensor-core kernels work in it, and an NCHW model pays a
reorder around each convolution (ultralytics' AutoBackend makes the same choice on CPU; BENCHMARKS.md has both
devices' numbers). The weights are converted once; each batch is converted on its way in (on CUDA graphs by the
copy into the graph's static input, so no extra pass). Transformers, plain callables and other CPUs stay NCHW.
"""
from __future__ import annotations

import json
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from inferstream.backends.base import ModelInfo
from inferstream.backends.compiled import InductorForward
from inferstream.backends.cuda_graphs import CudaGraphs, graph_buckets
from inferstream.backends.loader import GRAPH_MODES, info_from_export_metadata
from inferstream.backends.torch_module import (
    declared_info,
    dtype_for,
    first_line,
    flatten_outputs,
    is_torchscript,
    is_ultralytics,
    keep_torch_threads,
    load_checkpoint,
    network_of,
    prepare_ultralytics,
    resolve_factory,
)
from inferstream.errors import BackendInitError, ConfigError, UnsupportedModelError


class TorchBackend:
    """A torch module (or plain callable) on one device, returning the model's raw outputs as a list of tensors.

    Build it with :meth:`load` (a file) or :meth:`from_factory` (user code); the constructor takes a ready model.
    One caller at a time (``BatchGroup`` runs one batch at a time): with CUDA graphs the returned tensors are the
    graph's static outputs, valid until the next call.
    """

    def __init__(self, model: Callable[[Tensor], Any], info: ModelInfo, device: torch.device,
                 dtype: torch.dtype, *, graph: str = "off") -> None:
        """``graph``: "off", "cuda-graph" / "auto" (capture; "auto" falls back to eager on failure) or "inductor"
        (compiled, then captured as "auto")."""
        if graph not in GRAPH_MODES:
            raise ConfigError(f"graph={graph!r} is not one of {', '.join(GRAPH_MODES)}")
        if graph == "cuda-graph" and device.type != "cuda":
            raise ConfigError(f"graph=cuda-graph needs a CUDA device, got device={device}")
        self.memory_format = preferred_memory_format(model, device)
        if self.memory_format == torch.channels_last:
            model = model.to(memory_format=torch.channels_last)  # type: ignore[attr-defined]
        if graph == "inductor":
            model = InductorForward(model)
        self._model: Callable[[Tensor], Any] | None = model
        self.info = info
        self.device = device
        self.dtype = dtype
        self._graphs = (CudaGraphs(model, device, dtype, strict=graph == "cuda-graph",
                                   memory_format=self.memory_format)
                        if graph != "off" and device.type == "cuda" else None)

    @property
    def graph_status(self) -> str:
        """"off", "cuda-graph (k captured, replay times: ...)" or "eager: capture failed (...)", after
        "inductor, " when the forward is compiled."""
        compiled = "inductor, " if isinstance(self._model, InductorForward) else ""
        return compiled + ("off" if self._graphs is None else self._graphs.status)

    # --- construction ---------------------------------------------------------------------------------------

    @classmethod
    def load(cls, path: Path, *, device: torch.device, precision: str = "auto",
             trust_checkpoint: bool = False, graph: str = "auto") -> TorchBackend:
        """Load a TorchScript archive or a pickled checkpoint.

        Args:
            path: the model file (already checked to exist and be readable by the loader).
            device: where to run.
            precision: "auto" (fp16 on CUDA), "fp32" or "fp16".
            trust_checkpoint: allow ``weights_only=False`` for checkpoints that pickle Python classes.
            graph: "auto" (CUDA graphs on CUDA, eager if a capture fails), "off", "cuda-graph" (must capture) or
                "inductor" (compiled by ``torch.compile``, then captured as with "auto").

        Raises:
            ConfigError: the checkpoint needs full unpickling and ``trust_checkpoint`` is False.
            UnsupportedModelError: the file is neither TorchScript nor a checkpoint holding a network.
            BackendInitError: torch, or a package the checkpoint needs (e.g. ultralytics), failed.
        """
        dtype = dtype_for(precision, device)
        if is_torchscript(path) or path.suffix.lower() == ".torchscript":
            return cls._from_torchscript(path, device, dtype, graph=graph)
        obj = load_checkpoint(path, trust_checkpoint)
        model, ckpt = network_of(obj, path)
        # a checkpoint of our own classes is a fixed tensor program only when it is ultralytics'
        graph = "off" if graph == "auto" and not is_ultralytics(model) else graph
        return cls._from_module(model, device, dtype, ckpt=ckpt, source=str(path), graph=graph)

    @classmethod
    def from_factory(cls, module_name: str, attr: str, *, device: torch.device,
                     precision: str = "auto", graph: str = "auto") -> TorchBackend:
        """Call the user's ``module:attr`` (no arguments) and run what it returns.

        The result may be an ``nn.Module`` (moved to ``device`` and ``dtype``, put in eval mode) or any callable
        taking the batch. Optional attributes on it declare ModelInfo: ``names``, ``task``, ``end2end``,
        ``input_size`` (a size the model requires) or ``imgsz`` (the size it prefers, kept in ``info.extra``).
        ``graph="auto"`` runs a factory's model eager (its Python may have side effects a graph replay would
        skip); ``graph="cuda-graph"`` captures it.

        Raises:
            ModelNotFoundError: the module or the callable does not exist.
            ConfigError: the named attribute is not callable.
            BackendInitError: importing the module or calling the factory raised.
            UnsupportedModelError: the factory returned something that cannot be called on a batch.
        """
        spec = f"{module_name}:{attr}"
        factory = resolve_factory(module_name, attr)
        try:
            with keep_torch_threads():
                model = factory()
        except Exception as e:
            raise BackendInitError(f"model factory {spec} raised {type(e).__name__}: {e}") from e
        if not callable(model):
            raise UnsupportedModelError(f"model factory {spec} returned {type(model).__name__}, which cannot be "
                                        "called on a batch; return a torch.nn.Module or a callable")
        dtype = dtype_for(precision, device)
        graph = "off" if graph == "auto" else graph
        if isinstance(model, nn.Module):
            return cls._from_module(model, device, dtype, ckpt=None, source=spec, graph=graph)
        return cls(model, declared_info(model), device, dtype, graph=graph)

    @classmethod
    def _from_torchscript(cls, path: Path, device: torch.device, dtype: torch.dtype, *,
                          graph: str = "auto") -> TorchBackend:
        """``torch.jit.load`` plus the ``config.txt`` metadata ultralytics embeds (names, imgsz, task...)."""
        import torchvision  # type: ignore[import-untyped]  # noqa: F401 (registers the torchvision:: ops TorchScript files call)

        extra_files = {"config.txt": ""}
        try:
            model = torch.jit.load(
                str(path), map_location=device, _extra_files=extra_files)
        except Exception as e:
            raise UnsupportedModelError(f"{path} is not a TorchScript archive torch can load (tried "
                                        f"torch.jit.load: {type(e).__name__}: {first_line(e)})") from e
        model = model.to(dtype).eval()
        meta: dict[str, Any] = {}
        if extra_files["config.txt"]:
            try:
                meta = json.loads(extra_files["config.txt"])
            except ValueError:
                meta = {}  # foreign config.txt: carry no facts rather than wrong ones
        meta = meta if isinstance(meta, dict) else {}
        args = meta.get("args")
        # a trace bakes the anchor grid of its example size unless it was exported with dynamic=True
        fixed = not (isinstance(args, dict) and args.get("dynamic") is True)
        return cls(model, info_from_export_metadata(meta, export_size_is_fixed=fixed), device, dtype, graph=graph)

    @classmethod
    def _from_module(cls, model: nn.Module, device: torch.device, dtype: torch.dtype, *,
                     ckpt: dict[str, Any] | None, source: str, graph: str = "off") -> TorchBackend:
        """Put a module in inference shape: eval, no grads, device, dtype; ultralytics models get export mode."""
        try:
            if is_ultralytics(model):
                model, info = prepare_ultralytics(model, ckpt)
            else:
                info = declared_info(model)
            model = model.float().eval().to(device=device, dtype=dtype)
            model.requires_grad_(False)
        except (RuntimeError, torch.cuda.OutOfMemoryError) as e:
            raise BackendInitError(f"could not move {source} to {device} as {dtype}: {e}") from e
        return cls(model, info, device, dtype, graph=graph)

    # --- Backend protocol -----------------------------------------------------------------------------------

    def __call__(self, batch: Tensor) -> list[Tensor]:
        """Run one batch.

        Args:
            batch (Tensor[B, 3, H, W]): float RGB in [0, 1] on ``self.device``; cast to ``self.dtype`` if needed.

        Returns:
            list[Tensor]: the model's outputs in the order its ONNX export would list them, on ``self.device``,
            in the model's compute dtype.
        """
        if self._model is None:
            raise BackendInitError("this backend was closed")
        with torch.inference_mode():
            x = batch.to(dtype=self.dtype)
            if self._graphs is not None and x.is_cuda:
                replayed = self._graphs.run(x)  # the copy into the static input converts the layout
                if replayed is not None:
                    return replayed
            if self.memory_format == torch.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            out = self._model(x)
        return flatten_outputs(out)

    def warmup(self, batch_size: int, input_size: tuple[int, int]) -> None:
        """Get ready for real frames: capture the CUDA graphs of every batch bucket up to ``batch_size`` (when
        graphs are on), then run one dummy batch so lazy kernels, cuDNN autotuning and anchor grids are ready.

        Raises:
            BackendInitError: ``graph="cuda-graph"`` and a capture failed; ``graph="inductor"`` and compiling failed.
        """
        with torch.inference_mode():
            if isinstance(self._model, InductorForward):  # compiled now, outside any capture
                self._model(torch.zeros(batch_size, 3, *input_size, device=self.device, dtype=self.dtype)
                            .contiguous(memory_format=self.memory_format))
            if self._graphs is not None:
                for bucket in graph_buckets(batch_size):
                    self._graphs.prepare(bucket, input_size)
        self(torch.zeros(batch_size, 3, *input_size, device=self.device, dtype=self.dtype))
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def close(self) -> None:
        """Drop the model so its memory can be freed (the next load may be a hot swap on the same GPU)."""
        self._model = None
        self._graphs = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def preferred_memory_format(model: object, device: torch.device) -> torch.memory_format:
    """``channels_last`` for a convolutional module on CUDA or on an x86 CPU with oneDNN enabled, else
    ``contiguous_format``: transformers (RF-DETR's ViT backbone) have nothing to gain and their numbers would move,
    and other CPUs have no NHWC convolutions to gain from."""
    cpu_nhwc = (device.type == "cpu" and platform.machine() in {"x86_64", "AMD64"}
                and torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled)
    if not ((cpu_nhwc or device.type == "cuda") and isinstance(model, nn.Module) and _mostly_convolutions(model)):
        return torch.contiguous_format
    return torch.channels_last


def _mostly_convolutions(model: nn.Module) -> bool:
    """True when 2-D convolutions hold most of the module's weights (TorchScript modules included)."""
    conv = total = 0
    for m in model.modules():
        own = sum(p.numel() for p in m.parameters(recurse=False))
        total += own
        if isinstance(m, nn.Conv2d) or getattr(m, "original_name", None) == "Conv2d":
            conv += own
    return total > 0 and conv * 2 > total
