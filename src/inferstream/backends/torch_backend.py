"""Run a PyTorch model: TorchScript archives, pickled checkpoints (ultralytics ``.pt`` included) and factories.

Safety first: a pickled checkpoint is opened with ``torch.load(weights_only=True)``, which rebuilds tensors and
plain containers only. A file that needs more (ultralytics ``.pt`` files pickle their Python classes) is refused
with a ConfigError until the user sets ``trust-checkpoint=true``, because full unpickling executes whatever the
file names.

Outputs are normalised to what the model's ONNX export would emit, so one decoder serves both runtimes:
ultralytics heads are switched to export mode (``(B, 4+nc, A)`` for detect, ``(B, 300, 6)`` for end-to-end
heads, ``(output0, proto)`` for segment), and any nested tuple/list/dict of tensors is flattened in order.

CUDA graphs (``graph``): on a CUDA device the forward pass can be captured once per batch shape and replayed
(one launch instead of hundreds: 7x at batch 1 for yolo11s on an H200). ``warmup(batch_size)`` captures the
buckets 1, 2, 4, ... below ``batch_size`` and ``batch_size`` itself; a batch of n frames replays the smallest
bucket >= n, padded (the outputs are sliced back to n rows). ``auto`` captures only models whose forward is a
fixed tensor program (TorchScript archives, ultralytics checkpoints) and falls back to eager when a capture fails
(``graph_status`` says why); a factory's Python code may have side effects a replay would skip, so it runs eager
unless ``graph="cuda-graph"`` asks for capture (which then fails loudly).
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import pickle
import re
import sys
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import torch
from torch import Tensor, nn

from inferstream.backends.base import ModelInfo
from inferstream.backends.loader import info_from_export_metadata, size_hw
from inferstream.errors import BackendInitError, ConfigError, ModelNotFoundError, UnsupportedModelError

_TRUST_HINT = (
    "Full unpickling runs code that the file itself names, so a malicious checkpoint can do anything this process "
    "can. Only if you trust where the file came from, set trust-checkpoint=true (trust_checkpoint=True in Python); "
    "otherwise export it to ONNX or TorchScript (e.g. `yolo export model=FILE format=onnx`) and load that instead."
)


GRAPH_MODES: Final = ("auto", "off", "cuda-graph")
_MAX_GRAPHS: Final = 16  # captured shapes per backend; further shapes run eager


class TorchBackend:
    """A torch module (or plain callable) on one device, returning the model's raw outputs as a list of tensors.

    Build it with :meth:`load` (a file) or :meth:`from_factory` (user code); the constructor takes a ready model.
    One caller at a time (``BatchGroup`` runs one batch at a time): with CUDA graphs the returned tensors are the
    graph's static outputs, valid until the next call.
    """

    def __init__(self, model: Callable[[Tensor], Any], info: ModelInfo, device: torch.device,
                 dtype: torch.dtype, *, graph: str = "off") -> None:
        """``graph``: "off", or "cuda-graph" / "auto" (capture; "auto" falls back to eager on failure)."""
        if graph not in GRAPH_MODES:
            raise ConfigError(f"graph={graph!r} is not one of {', '.join(GRAPH_MODES)}")
        if graph != "off" and device.type != "cuda":
            if graph == "cuda-graph":
                raise ConfigError(f"graph=cuda-graph needs a CUDA device, got device={device}")
            graph = "off"
        self._model: Callable[[Tensor], Any] | None = model
        self.info = info
        self.device = device
        self.dtype = dtype
        self._graphs = _CudaGraphs(model, device, dtype, strict=graph == "cuda-graph") if graph != "off" else None

    @property
    def graph_status(self) -> str:
        """"off", "cuda-graph (k captured)" or "eager: capture failed (...)"."""
        if self._graphs is None:
            return "off"
        return self._graphs.status

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
            graph: "auto" (CUDA graphs on CUDA, eager if a capture fails), "off" or "cuda-graph" (must capture).

        Raises:
            ConfigError: the checkpoint needs full unpickling and ``trust_checkpoint`` is False.
            UnsupportedModelError: the file is neither TorchScript nor a checkpoint holding a network.
            BackendInitError: torch, or a package the checkpoint needs (e.g. ultralytics), failed.
        """
        dtype = _dtype_for(precision, device)
        if _is_torchscript(path) or path.suffix.lower() == ".torchscript":
            return cls._from_torchscript(path, device, dtype, graph=graph)
        obj = _load_checkpoint(path, trust_checkpoint)
        model, ckpt = _network_of(obj, path)
        # a checkpoint of our own classes is a fixed tensor program only when it is ultralytics'
        graph = "off" if graph == "auto" and not _is_ultralytics(model) else graph
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
        factory = _resolve_factory(module_name, attr)
        try:
            with _keep_torch_threads():
                model = factory()
        except Exception as e:
            raise BackendInitError(f"model factory {spec} raised {type(e).__name__}: {e}") from e
        if not callable(model):
            raise UnsupportedModelError(f"model factory {spec} returned {type(model).__name__}, which cannot be "
                                        "called on a batch; return a torch.nn.Module or a callable")
        dtype = _dtype_for(precision, device)
        graph = "off" if graph == "auto" else graph
        if isinstance(model, nn.Module):
            return cls._from_module(model, device, dtype, ckpt=None, source=spec, graph=graph)
        return cls(model, _declared_info(model), device, dtype, graph=graph)

    @classmethod
    def _from_torchscript(cls, path: Path, device: torch.device, dtype: torch.dtype, *,
                          graph: str = "auto") -> TorchBackend:
        """``torch.jit.load`` plus the ``config.txt`` metadata ultralytics embeds (names, imgsz, task...)."""
        import torchvision  # type: ignore[import-untyped]  # noqa: F401  (registers ops a script may call, e.g. nms)

        extra_files = {"config.txt": ""}
        try:
            model = torch.jit.load(  # type: ignore[no-untyped-call]
                str(path), map_location=device, _extra_files=extra_files)
        except Exception as e:
            raise UnsupportedModelError(f"{path} is not a TorchScript archive torch can load (tried "
                                        f"torch.jit.load: {type(e).__name__}: {_first_line(e)})") from e
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
            if _is_ultralytics(model):
                model, info = _prepare_ultralytics(model, ckpt)
            else:
                info = _declared_info(model)
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
                replayed = self._graphs.run(x)
                if replayed is not None:
                    return replayed
            out = self._model(x)
        return _flatten_outputs(out)

    def warmup(self, batch_size: int, input_size: tuple[int, int]) -> None:
        """Get ready for real frames: capture the CUDA graphs of every batch bucket up to ``batch_size`` (when
        graphs are on), then run one dummy batch so lazy kernels, cuDNN autotuning and anchor grids are ready.

        Raises:
            BackendInitError: ``graph="cuda-graph"`` and a capture failed.
        """
        if self._graphs is not None:
            with torch.inference_mode():
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


# --- CUDA graphs ---------------------------------------------------------------------------------------------


def graph_buckets(batch_size: int) -> list[int]:
    """Batch sizes captured for ``batch_size``: the powers of two below it, and itself (``8 -> [1, 2, 4, 8]``,
    ``12 -> [1, 2, 4, 8, 12]``); a batch runs on the smallest bucket that holds it."""
    if batch_size < 1:
        raise ValueError(f"batch_size: expected >= 1, got {batch_size}")
    buckets = [1 << i for i in range(batch_size.bit_length()) if 1 << i < batch_size]
    return [*buckets, batch_size]


class _Captured:
    """One captured forward: its static input, graph and static outputs."""

    __slots__ = ("graph", "input", "outputs", "sliceable")

    def __init__(self, graph: torch.cuda.CUDAGraph, static_input: Tensor, outputs: list[Tensor]) -> None:
        self.graph, self.input, self.outputs = graph, static_input, outputs
        # padding a smaller batch into this graph is only right when every output is batch-first
        self.sliceable = all(o.ndim > 0 and o.shape[0] == static_input.shape[0] for o in outputs)


class _CudaGraphs:
    """CUDA graphs of one model keyed by input shape ``(B, H, W)``, sharing one memory pool.

    The pool is shared because replays never overlap and every caller consumes the outputs before the next call
    (a replay may reuse memory that held another graph's outputs).
    """

    def __init__(self, model: Callable[[Tensor], Any], device: torch.device, dtype: torch.dtype,
                 strict: bool) -> None:
        self._model, self._device, self._dtype, self._strict = model, device, dtype, strict
        self._pool = torch.cuda.graph_pool_handle()
        self._graphs: dict[tuple[int, int, int], _Captured] = {}
        self.failure: str | None = None

    @property
    def status(self) -> str:
        if self.failure is not None:
            return f"eager: capture failed ({self.failure})"
        return f"cuda-graph ({len(self._graphs)} captured: {sorted(self._graphs)})"

    def prepare(self, batch: int, size_hw: tuple[int, int]) -> None:
        """Capture the graph of ``(batch, *size_hw)`` unless it exists or capturing was given up."""
        key = (batch, *size_hw)
        if key not in self._graphs and self.failure is None:
            self._capture(key)

    def run(self, x: Tensor) -> list[Tensor] | None:
        """Replay the graph that fits ``x`` (``Tensor[B, 3, H, W]``, model dtype), capturing one if needed.

        Returns:
            The outputs (first dimension sliced to B when the batch was padded), or None: run eager.
        """
        b, _, h, w = x.shape
        fits = [k for k, c in self._graphs.items() if k[1:] == (h, w) and (k[0] == b or k[0] > b and c.sliceable)]
        if not fits:
            if self.failure is not None or len(self._graphs) >= _MAX_GRAPHS:
                return None
            captured = self._capture((b, h, w))
            if captured is None:
                return None
            key = (b, h, w)
        else:
            key = min(fits)
        cap = self._graphs[key]
        cap.input[:b].copy_(x)
        cap.graph.replay()
        return cap.outputs if key[0] == b else [o[:b] for o in cap.outputs]

    def _capture(self, key: tuple[int, int, int]) -> _Captured | None:
        static = torch.zeros((key[0], 3, key[1], key[2]), dtype=self._dtype, device=self._device)
        errors = []
        # a TorchScript module is tried as the interpreter optimises it (fusion), then unoptimised
        modes = (True, False) if isinstance(self._model, torch.jit.ScriptModule) else (True,)
        for optimize in modes:
            try:
                with torch.jit.optimized_execution(optimize):
                    graph, outputs = self._record(static)
            except Exception as e:  # noqa: BLE001  (auto mode: any capture failure means eager, reason kept)
                errors.append(f"{type(e).__name__}: {_last_line(e)}")
                _reset_rng_capture_state()
                continue
            captured = self._graphs[key] = _Captured(graph, static, outputs)
            return captured
        reason = f"batch {key[0]} at {key[1]}x{key[2]}: {' / '.join(errors)}"
        if self._strict:
            raise BackendInitError(f"CUDA graph capture failed for {reason} (graph=auto runs such models eager)")
        self.failure = reason
        self._graphs.clear()
        return None

    def _record(self, static: Tensor) -> tuple[torch.cuda.CUDAGraph, list[Tensor]]:
        side = torch.cuda.Stream(self._device)
        side.wait_stream(torch.cuda.current_stream(self._device))
        with torch.cuda.stream(side):  # warm-up off the capture (lazy init, cuDNN choice, TorchScript profiling)
            for _ in range(3):
                self._model(static)
        torch.cuda.current_stream(self._device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
            outputs = _flatten_outputs(self._model(static))
        return graph, outputs


def _reset_rng_capture_state() -> None:
    """A capture that CUDA invalidated (a sync inside the model) ends without torch's capture epilogue, which
    leaves the CUDA RNG in capture mode ("Offset increment outside graph capture" on the next random op); an
    empty capture that ends cleanly resets it."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "the CUDA Graph is empty"
            with torch.cuda.graph(torch.cuda.CUDAGraph()):
                pass
    except Exception:  # noqa: BLE001, S110  (best effort: eager inference does not need the RNG)
        pass


def _last_line(e: BaseException) -> str:
    """The cause of a TorchScript error is on its last line (the first says only that an operation failed)."""
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    if len(lines) > 1 and "TorchScript interpreter" in lines[0]:
        return lines[-1]
    return lines[0] if lines else type(e).__name__


# --- loading helpers ----------------------------------------------------------------------------------------


def _dtype_for(precision: str, device: torch.device) -> torch.dtype:
    """auto: fp16 on CUDA (tensor cores, half the bandwidth), fp32 on CPU (fp16 CPU kernels are slow or missing)."""
    if precision == "fp16" or (precision == "auto" and device.type == "cuda"):
        return torch.float16
    return torch.float32


def _is_torchscript(path: Path) -> bool:
    """TorchScript archives are zips with ``<name>/constants.pkl``; ``torch.save`` zips have no such record."""
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as zf:
        return any(name.split("/", 1)[-1] == "constants.pkl" for name in zf.namelist())


def _load_checkpoint(path: Path, trust: bool) -> Any:
    """``torch.load(weights_only=True)`` first; full unpickling only when the user trusts the file."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        needed = _unsafe_globals(path, e)
        if not needed:
            raise UnsupportedModelError(f"{path} is not a PyTorch model file (tried TorchScript and "
                                        f"torch.load(weights_only=True): {_first_line(e)})") from e
    except Exception as e:
        raise UnsupportedModelError(f"{path} is not a PyTorch model file (tried TorchScript and "
                                    f"torch.load(weights_only=True): {type(e).__name__}: {_first_line(e)})") from e
    needed = sorted(needed, key=lambda g: (g.startswith(("torch.", "collections.", "builtins.")), g))
    shown = ", ".join(needed[:3]) + (", ..." if len(needed) > 3 else "")
    if not trust:
        raise ConfigError(f"{path.name} is a pickled checkpoint that needs full unpickling (it names Python "
                          f"classes: {shown}). {_TRUST_HINT}")
    missing = sorted({g.split(".")[0] for g in needed if not _importable(g.split(".")[0])})
    if "__main__" in missing:
        raise UnsupportedModelError(f"{path.name} was pickled from a script's __main__, so its classes cannot be "
                                    "found again; save the model from an importable module or use a factory")
    if missing:
        extra = " (the optional extra: pip install 'inferstream[ultralytics]', AGPL-3.0)" if "ultralytics" in \
            missing else ""
        raise BackendInitError(f"{path.name} needs the Python package(s) {', '.join(missing)} to unpickle, and "
                               f"they are not installed{extra}; or export the model to ONNX and load that")
    try:
        with _keep_torch_threads():
            return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:
        raise BackendInitError(f"unpickling {path} failed: {type(e).__name__}: {_first_line(e)}") from e


def _importable(top: str) -> bool:
    """Whether a top-level module can be imported, without importing it."""
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):  # ValueError: __main__ (or a module) without a spec
        return False


def _unsafe_globals(path: Path, err: pickle.UnpicklingError) -> list[str]:
    """Python globals a checkpoint references beyond what ``weights_only`` allows ([] when it is just unreadable)."""
    if zipfile.is_zipfile(path):
        try:
            return list(torch.serialization.get_unsafe_globals_in_checkpoint(path))
        except Exception:  # noqa: BLE001  (a damaged zip: treat as unreadable)
            return []
    # legacy (pre-1.6, non-zip) format: only the error text names the refused global
    return re.findall(r"GLOBAL ([\w.]+)", str(err))


def _network_of(obj: Any, path: Path) -> tuple[nn.Module, dict[str, Any] | None]:
    """The nn.Module inside what ``torch.load`` returned: the object itself, or a checkpoint's ``ema``/``model``."""
    if isinstance(obj, nn.Module):
        return obj, None
    if isinstance(obj, dict):
        for key in ("ema", "model"):
            if isinstance(obj.get(key), nn.Module):
                return obj[key], obj
        if obj and all(isinstance(v, Tensor) for v in obj.values()) or isinstance(obj.get("model"), dict):
            raise UnsupportedModelError(
                f"{path} holds only weights (a state_dict), not the network: write a factory that builds the "
                "model and loads these weights, and pass it as 'package.module:function'")
    raise UnsupportedModelError(f"{path} holds a {type(obj).__name__}, not a torch.nn.Module or a checkpoint "
                                "with a 'model' entry")


def _resolve_factory(module_name: str, attr: str) -> Callable[[], Any]:
    """Import ``module_name`` (a dotted name or a ``.py`` path) and return its ``attr``."""
    spec = f"{module_name}:{attr}"
    try:
        with _keep_torch_threads():
            module = _import_user_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and (module_name == e.name or module_name.startswith(e.name + ".")):
            raise ModelNotFoundError(f"model factory {spec}: no module named {e.name!r} (is it installed or on "
                                     "PYTHONPATH?)") from e
        raise BackendInitError(f"model factory {spec}: importing it failed, it needs {e.name!r}") from e
    except (ModelNotFoundError, BackendInitError):
        raise
    except Exception as e:
        raise BackendInitError(f"model factory {spec}: importing it raised {type(e).__name__}: {e}") from e
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ModelNotFoundError(f"model factory {spec}: {module_name} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ConfigError(f"model factory {spec} is a {type(obj).__name__}, not a callable")
    return obj  # type: ignore[no-any-return]


def _import_user_module(module_name: str) -> Any:
    """Dotted names import normally; a ``.py`` path is loaded as a module named after its file."""
    if not module_name.endswith(".py"):
        return importlib.import_module(module_name)
    file = Path(module_name).expanduser()
    if not file.is_file():
        raise ModelNotFoundError(f"model factory file not found: {file}")
    name = f"inferstream_user_{file.stem}"
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ModelNotFoundError(f"model factory file cannot be imported: {file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look modules up here
    spec.loader.exec_module(module)
    return module


@contextmanager
def _keep_torch_threads() -> Iterator[None]:
    """Importing ultralytics (which unpickling or user code may do) can set torch to 1 thread; undo that."""
    threads = torch.get_num_threads()
    try:
        yield
    finally:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


# --- ModelInfo and output shape ------------------------------------------------------------------------------


def _declared_info(model: object) -> ModelInfo:
    """ModelInfo from attributes a user's model may declare; nothing is inferred from its structure.

    ``input_size`` declares a size the model requires; ``imgsz`` the size it prefers (kept in ``extra``).
    """
    meta = {key: getattr(model, key, None) for key in ("names", "task", "end2end", "imgsz")}
    return info_from_export_metadata(meta, input_size=size_hw(getattr(model, "input_size", None)))


def _is_ultralytics(model: nn.Module) -> bool:
    """Checked by module name so that ultralytics (AGPL, optional) is never imported just to ask."""
    return type(model).__module__.startswith("ultralytics.")


def _prepare_ultralytics(model: Any, ckpt: dict[str, Any] | None) -> tuple[nn.Module, ModelInfo]:
    """Make an ultralytics model return what its ONNX export returns, and read its facts.

    A head with a one-to-one branch (YOLO26, YOLOv10) runs end-to-end: ``(B, 300, 6)`` final detections, as
    ``export(nms=False)`` produces; the branch that is not used is dropped by ``fuse``. Every head is put in
    export mode, which returns the decoded tensor(s) alone instead of ``(y, raw_preds)``.
    """
    from ultralytics.nn.tasks import guess_model_task  # the model's classes come from ultralytics: it is there

    inner = getattr(model, "model", None)
    if isinstance(inner, nn.Module) and not isinstance(inner, nn.Sequential):
        model = inner  # a YOLO(...) wrapper from a factory: run the network it holds, not its predictor
    head = model.model[-1] if isinstance(getattr(model, "model", None), nn.Sequential) else None
    if head is not None and getattr(head, "one2one_cv2", None) is not None:
        head.end2end = True
    model = model.float()
    if hasattr(model, "fuse"):
        model = model.fuse(verbose=False)
    for m in model.modules():
        if type(m).__module__ == "ultralytics.nn.modules.head" and isinstance(getattr(m, "export", None), bool):
            m.export = True
    train_args = ckpt.get("train_args") if ckpt else None
    if not isinstance(train_args, dict):
        train_args = getattr(model, "args", None)  # ultralytics attaches the training args to the model too
    stride = getattr(model, "stride", None)
    meta: dict[str, Any] = {
        "names": getattr(model, "names", None),
        "task": getattr(model, "task", None) or guess_model_task(model),  # type: ignore[no-untyped-call]
        "end2end": bool(getattr(model, "end2end", False)),
        "imgsz": train_args.get("imgsz") if isinstance(train_args, dict) else None,  # the trained size
    }
    if isinstance(stride, Tensor) and stride.numel():
        meta["stride"] = int(stride.max())
    # eager heads rebuild their anchors for any input size: imgsz is the trained size, kept in extra only
    return model, info_from_export_metadata(meta)


def _flatten_outputs(out: Any) -> list[Tensor]:
    """Tensors in depth-first order from a tensor or nested list/tuple/dict (None entries skipped)."""
    if isinstance(out, Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [t for item in out if item is not None for t in _flatten_outputs(item)]
    raise UnsupportedModelError(f"the model returned {type(out).__name__}; expected a tensor or a list, tuple "
                                "or dict of tensors")
