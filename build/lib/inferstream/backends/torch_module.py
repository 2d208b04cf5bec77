"""What a PyTorch model file or factory holds, made into a module that returns what its ONNX export would.

Safety first: a pickled checkpoint is opened with ``torch.load(weights_only=True)``, which rebuilds tensors and
plain containers only. A file that needs more (ultralytics ``.pt`` files pickle their Python classes) is refused
with a ConfigError until the user sets ``trust-checkpoint=true``, because full unpickling executes whatever the
file names. Ultralytics heads are switched to export mode (``(B, 4+nc, A)`` for detect, ``(B, 300, 6)`` for
end-to-end heads, ``(output0, proto)`` for segment), and any nested tuple/list/dict of outputs is flattened in order.
"""
from __future__ import annotations

import importlib
import importlib.util
import pickle
import re
import sys
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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



def dtype_for(precision: str, device: torch.device) -> torch.dtype:
    """auto: fp16 on CUDA (tensor cores, half the bandwidth), fp32 on CPU (fp16 CPU kernels are slow or missing)."""
    if precision == "fp16" or (precision == "auto" and device.type == "cuda"):
        return torch.float16
    return torch.float32


def is_torchscript(path: Path) -> bool:
    """TorchScript archives are zips with ``<name>/constants.pkl``; ``torch.save`` zips have no such record."""
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as zf:
        return any(name.split("/", 1)[-1] == "constants.pkl" for name in zf.namelist())


def load_checkpoint(path: Path, trust: bool) -> Any:
    """``torch.load(weights_only=True)`` first; full unpickling only when the user trusts the file."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        needed = _unsafe_globals(path, e)
        if not needed:  # torch's own advice (weights_only=False) would skip our trust-checkpoint and its warning
            raise UnsupportedModelError(f"{path} is not a PyTorch model file (tried TorchScript and "
                                        f"torch.load(weights_only=True): {_unpickler_detail(e)}). If it is a "
                                        "checkpoint that pickles Python classes and you trust where it came from, "
                                        "trust-checkpoint=true unpickles it fully") from e
    except Exception as e:
        raise UnsupportedModelError(f"{path} is not a PyTorch model file (tried TorchScript and "
                                    f"torch.load(weights_only=True): {type(e).__name__}: {first_line(e)})") from e
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
        with keep_torch_threads():
            return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:
        raise BackendInitError(f"unpickling {path} failed: {type(e).__name__}: {first_line(e)}") from e


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
        except Exception:  # noqa: BLE001
            return []
    # legacy (pre-1.6, non-zip) format: only the error text names the refused global
    return re.findall(r"GLOBAL ([\w.]+)", str(err))


def network_of(obj: Any, path: Path) -> tuple[nn.Module, dict[str, Any] | None]:
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


def resolve_factory(module_name: str, attr: str) -> Callable[[], Any]:
    """Import ``module_name`` (a dotted name or a ``.py`` path) and return its ``attr``."""
    spec = f"{module_name}:{attr}"
    try:
        with keep_torch_threads():
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
def keep_torch_threads() -> Iterator[None]:
    """Importing ultralytics (which unpickling or user code may do) can set torch to 1 thread; undo that."""
    threads = torch.get_num_threads()
    try:
        yield
    finally:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)


def _unpickler_detail(e: BaseException) -> str:
    """What torch's weights-only unpickler choked on ("Unsupported operand 84"), without torch's advice."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    for i, line in enumerate(lines):
        if "WeightsUnpickler error" in line:
            rest = line.split("WeightsUnpickler error", 1)[1].lstrip(": ")
            return rest or (lines[i + 1] if i + 1 < len(lines) else "unreadable pickle")
    return first_line(e)


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__



def declared_info(model: object) -> ModelInfo:
    """ModelInfo from attributes a user's model may declare; nothing is inferred from its structure.

    ``input_size`` declares a size the model requires; ``imgsz`` the size it prefers (kept in ``extra``).
    """
    meta = {key: getattr(model, key, None) for key in ("names", "task", "end2end", "imgsz")}
    return info_from_export_metadata(meta, input_size=size_hw(getattr(model, "input_size", None)))


def is_ultralytics(model: nn.Module) -> bool:
    """Checked by module name so that ultralytics (AGPL, optional) is never imported just to ask."""
    return type(model).__module__.startswith("ultralytics.")


def prepare_ultralytics(model: Any, ckpt: dict[str, Any] | None) -> tuple[nn.Module, ModelInfo]:
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
        "head": "rtdetr" if type(head).__name__ == "RTDETRDecoder" else None,
        "kpt_shape": getattr(head, "kpt_shape", None),
    }
    if isinstance(stride, Tensor) and stride.numel():
        meta["stride"] = int(stride.max())
    # eager heads rebuild their anchors for any input size: imgsz is the trained size, kept in extra only
    return model, info_from_export_metadata(meta)


def flatten_outputs(out: Any) -> list[Tensor]:
    """Tensors in depth-first order from a tensor or nested list/tuple/dict (None entries skipped)."""
    if isinstance(out, Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        return [t for item in out if item is not None for t in flatten_outputs(item)]
    raise UnsupportedModelError(f"the model returned {type(out).__name__}; expected a tensor or a list, tuple "
                                "or dict of tensors")
