"""Run a model on a remote KServe v2 server (Triton Inference Server, MLServer): nvinferserver's role.

The spec is a URL: ``grpc://host:8001/name`` or ``http://host:8000/name`` (``grpcs``/``https`` for TLS), with an
optional ``/VERSION`` after the name and options as a query: ``?timeout=10&retries=3&shm=auto``. The batch's
preprocessed tensor goes out, the raw outputs come back, and our decoders run here, so a remote model decodes
exactly as the same file would locally.

What the model is comes from the server: the input's name, shape and datatype (model metadata), the largest batch
(Triton's model config ``max_batch_size``), and labels, task and export size when the config's ``parameters``
carry ultralytics' metadata keys (``names``, ``task``, ``imgsz``...). The server's metadata lists its extensions:
a server without the model-configuration one (MLServer) gives the model metadata only, and one without
``binary_tensor_data`` gets JSON tensors over HTTP.

Never a hang: every call has a deadline (``timeout`` seconds), a transport failure is retried ``retries`` times
with a doubling pause, then the call fails with InferenceServerError naming the URL. A request the server
refuses (wrong shape or type) is not retried. On a loopback server with the ``system_shared_memory`` extension
the input travels through a shared-memory region registered with the server (``shm=auto``; ``shm=off`` sends it in
the request); if registering fails (a server in another IPC namespace) it goes in the request, with one warning.
Outputs always come back in the response.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import parse_qs, urlsplit

import numpy as np
import torch
from torch import Tensor

from inferstream.backends.base import ModelInfo
from inferstream.backends.loader import info_from_export_metadata, parse_export_metadata
from inferstream.errors import BackendInitError, ConfigError, InferenceServerError, UnsupportedModelError

if TYPE_CHECKING:
    from collections.abc import Callable

_log = logging.getLogger(__name__)

_DTYPES: Final[dict[str, torch.dtype]] = {"FP32": torch.float32, "FP16": torch.float16}
_LOOPBACK: Final = frozenset({"127.0.0.1", "localhost", "::1"})
# the server understood the request and refused it: retrying cannot help
_REFUSED: Final = frozenset({"StatusCode.INVALID_ARGUMENT", "400", "StatusCode.UNIMPLEMENTED"})
_DEFAULT_PORTS: Final = {"grpc": 8001, "grpcs": 8001, "http": 8000, "https": 8000}


@dataclass(frozen=True, slots=True)
class RemoteSpec:
    """A parsed model URL."""

    scheme: str
    host: str
    port: int
    model: str
    version: str = ""
    timeout: float = 10.0
    retries: int = 3
    shm: str = "auto"

    @property
    def url(self) -> str:
        version = f"/{self.version}" if self.version else ""
        return f"{self.scheme}://{self.host}:{self.port}/{self.model}{version}"

    @property
    def grpc(self) -> bool:
        return self.scheme.startswith("grpc")


def parse_spec(spec: str) -> RemoteSpec:
    """``grpc://host:8001/name[/version][?timeout=S&retries=N&shm=auto|off]``; no scheme means gRPC.

    Raises:
        ConfigError: not such a URL, or an option out of range.
    """
    parts = urlsplit(spec if "://" in spec else f"grpc://{spec}")
    scheme = parts.scheme.lower()
    path = [p for p in parts.path.split("/") if p]
    if scheme not in _DEFAULT_PORTS or not parts.hostname or not 1 <= len(path) <= 2 or parts.username:
        raise ConfigError(f"model {spec!r}: expected grpc://HOST:PORT/MODEL[/VERSION] or http://HOST:PORT/MODEL "
                          "(no user:password in the URL)")
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    unknown = set(query) - {"timeout", "retries", "shm"}
    if unknown:
        raise ConfigError(f"model {spec!r}: unknown option(s) {sorted(unknown)}; known: timeout, retries, shm")
    try:
        timeout = float(query.get("timeout", 10.0))
        retries = int(query.get("retries", 3))
        port = parts.port or _DEFAULT_PORTS[scheme]
    except ValueError as e:
        raise ConfigError(f"model {spec!r}: {e}") from None
    shm = query.get("shm", "auto")
    if not 0 < timeout <= 3600 or not 0 <= retries <= 20 or shm not in ("auto", "off"):
        raise ConfigError(f"model {spec!r}: timeout must be in (0, 3600] s, retries in [0, 20], shm auto or off")
    return RemoteSpec(scheme, parts.hostname, port, path[0], path[1] if len(path) == 2 else "", timeout, retries,
                      shm)


class TritonBackend:
    """One model on a KServe v2 server; call it with a torch batch, get torch outputs on ``device``."""

    def __init__(self, client: Any, spec: RemoteSpec, info: ModelInfo, device: torch.device, dtype: torch.dtype,
                 input_name: str, output_names: list[str], max_batch: int | None,
                 extensions: frozenset[str] = frozenset()) -> None:
        self._client: Any = client
        # tritonclient's HTTP client runs on gevent, whose hub belongs to one thread: a client made on the thread
        # that loaded the model hangs when a streaming thread calls it. So each calling thread makes its own.
        self._local = threading.local()
        self._local.client = client
        self.spec = spec
        self.info = info
        self.device = device
        self.dtype = dtype
        self._input_name = input_name
        self._output_names = output_names
        self._max_batch = max_batch
        self._lock = threading.Lock()  # one request at a time: the shared-memory region is reused
        self._shm: _InputRegion | None = None
        self._shm_ok = spec.shm == "auto" and spec.host in _LOOPBACK and "system_shared_memory" in extensions
        # over HTTP, tensors travel as raw bytes only where the server has Triton's binary extension (MLServer: JSON)
        self._binary = spec.grpc or "binary_tensor_data" in extensions

    @classmethod
    def load(cls, spec: str, *, device: torch.device, precision: str = "auto",
             trust_checkpoint: bool = False) -> TritonBackend:
        """Connect, check the model is ready and fits (one NCHW RGB float input), and read what it is.

        Raises:
            ConfigError: a malformed URL, or a precision the server's input dtype contradicts.
            BackendInitError: tritonclient is missing, the server is unreachable or the model is not ready.
            UnsupportedModelError: the model's inputs are not one ``[B, 3, H, W]`` float tensor.
        """
        del trust_checkpoint
        remote = parse_spec(spec)
        client = _connect(remote)
        as_json = {"as_json": True} if remote.grpc else {}  # the HTTP client always answers with JSON
        server = _ask(remote, "read the server's metadata", lambda **kw: client.get_server_metadata(**as_json, **kw))
        extensions = frozenset(server.get("extensions", ()))
        meta = _ask(remote, "read the model's metadata", lambda **kw: client.get_model_metadata(
            remote.model, remote.version, **as_json, **kw))
        inputs, outputs = meta.get("inputs", []), meta.get("outputs", [])
        if len(inputs) != 1:
            raise UnsupportedModelError(f"{remote.url} takes {len(inputs)} inputs "
                                        f"({', '.join(i['name'] for i in inputs)}); inferstream sends one image batch")
        name, shape, datatype = inputs[0]["name"], [int(d) for d in inputs[0]["shape"]], inputs[0]["datatype"]
        if len(shape) != 4 or shape[1] not in (3, -1) or datatype not in _DTYPES:
            raise UnsupportedModelError(f"{remote.url}: the server offers input {name!r} {datatype} {shape}; "
                                        "inferstream sends FP32 or FP16 NCHW RGB in [0, 1], expected shape "
                                        "[B, 3, H, W] (e.g. [-1, 3, 640, 640])")
        dtype = _DTYPES[datatype]
        wanted = {"fp32": torch.float32, "fp16": torch.float16}.get(precision)
        if wanted is not None and wanted != dtype:
            raise ConfigError(f"precision={precision} but {remote.url} takes {datatype} input; the server's model "
                              "fixes it: use precision=auto")
        config = _model_config(client, remote) if "model_configuration" in extensions else {}
        max_batch = int(config.get("max_batch_size", 0)) or None
        static_batch = shape[0] if shape[0] > 0 and max_batch is None else None
        params = {k: str(v.get("string_value", "")) for k, v in (config.get("parameters") or {}).items()}
        extra = {"input_name": name, "output_names": ",".join(o["name"] for o in outputs), "server": remote.url,
                 "server_version": f"{server.get('name', '?')} {server.get('version', '?')}"}
        hw = (shape[2], shape[3]) if shape[2] > 0 and shape[3] > 0 else None
        info = info_from_export_metadata(parse_export_metadata(params), input_size=hw, static_batch=static_batch,
                                         extra=extra)
        return cls(client, remote, info, device, dtype, name, [o["name"] for o in outputs], max_batch, extensions)

    def __call__(self, batch: Tensor) -> list[Tensor]:
        """Send one batch (in chunks of the server's largest batch) and return its outputs on ``self.device``.

        Args:
            batch (Tensor[B, 3, H, W]): float RGB in [0, 1]; cast to the server's input dtype.

        Returns:
            list[Tensor]: the outputs in the order the server's metadata declares them.

        Raises:
            InferenceServerError: the server refused the request, or stayed unreachable through the retries.
        """
        if self._client is None:
            raise BackendInitError("this backend was closed")
        if self.info.input_size is not None and tuple(batch.shape[2:]) != self.info.input_size:
            h, w = self.info.input_size
            raise ConfigError(f"{self.spec.url} takes {h}x{w} input, got {batch.shape[2]}x{batch.shape[3]}")
        x = batch.to(dtype=self.dtype).detach().cpu().contiguous().numpy()
        fixed = self.info.static_batch
        step = self._max_batch or fixed or len(x)
        with self._lock:
            parts = []
            for start in range(0, len(x), step):
                part = x[start:start + step]
                if fixed and len(part) < fixed:  # a fixed-batch model: pad the last chunk, drop its extra rows below
                    part = np.concatenate([part, np.zeros((fixed - len(part), *part.shape[1:]), part.dtype)])
                parts.append(self._infer(part))
        outs = [np.concatenate([p[k] for p in parts])[: len(x)] for k in range(len(self._output_names))]
        return [torch.from_numpy(o).to(self.device) for o in outs]

    def warmup(self, batch_size: int, input_size: tuple[int, int]) -> None:
        """One dummy request: the server loads its instances and we open the connection and the shm region."""
        self(torch.zeros(batch_size, 3, *input_size, dtype=self.dtype))

    def close(self) -> None:
        """Unregister and free the shared-memory region, close the connection (gRPC; an HTTP client is tied to
        the gevent hub of the thread that made it, so it is left to the garbage collector)."""
        if self._client is None:
            return
        client = self._thread_client()
        self._client = None
        if self._shm is not None:
            self._shm.close(client)
            self._shm = None
        if self.spec.grpc:
            try:
                client.close()
            except Exception:  # noqa: BLE001
                _log.debug("closing the client of %s failed", self.spec.url, exc_info=True)

    def _infer(self, x: np.ndarray) -> list[np.ndarray]:
        mod = _client_module(self.spec)
        request = mod.InferInput(self._input_name, list(x.shape), "FP16" if x.dtype == np.float16 else "FP32")
        if not (self._shm_ok and self._place_in_shm(x, request)):
            request.set_data_from_numpy(x, **({} if self.spec.grpc else {"binary_data": self._binary}))
        binary = {} if self.spec.grpc else {"binary_data": self._binary}
        outputs = [mod.InferRequestedOutput(n, **binary) for n in self._output_names]
        client = self._thread_client()
        result = _ask(self.spec, "infer", lambda **kw: client.infer(
            self.spec.model, [request], model_version=self.spec.version, outputs=outputs, **kw), runtime=True)
        return [np.asarray(result.as_numpy(n)) for n in self._output_names]

    def _thread_client(self) -> Any:
        """The client for the calling thread (gRPC's is thread-safe and shared; HTTP's is made per thread)."""
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._client if self.spec.grpc else _new_client(self.spec)
            self._local.client = client
        return client

    def _place_in_shm(self, x: np.ndarray, request: Any) -> bool:
        """Copy ``x`` into the registered region and point the request at it; False (once warned) if the server
        cannot use shared memory."""
        try:
            if self._shm is None or self._shm.size < x.nbytes:
                if self._shm is not None:
                    self._shm.close(self._thread_client())
                self._shm = None
                self._shm = _InputRegion.create(self._thread_client(), self.spec, x.nbytes)
            self._shm.write(x)
        except Exception as exc:  # noqa: BLE001
            self._shm_ok = False
            _log.warning("%s: system shared memory is not usable (%s); sending tensors in the requests",
                         self.spec.url, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            return False
        request.set_shared_memory(self._shm.name, x.nbytes)
        return True


class _InputRegion:
    """A POSIX shared-memory region registered with the server (tritonclient's system shm utilities)."""

    def __init__(self, handle: Any, name: str, size: int) -> None:
        self.handle, self.name, self.size = handle, name, size

    @classmethod
    def create(cls, client: Any, spec: RemoteSpec, size: int) -> _InputRegion:
        import tritonclient.utils.shared_memory as shm  # type: ignore[import-untyped]

        name = f"inferstream-{os.getpid()}-{id(client):x}"
        handle = shm.create_shared_memory_region(name, f"/{name}", size)
        try:
            client.register_system_shared_memory(name, f"/{name}", size)
        except Exception:
            shm.destroy_shared_memory_region(handle)
            raise
        return cls(handle, name, size)

    def write(self, x: np.ndarray) -> None:
        import tritonclient.utils.shared_memory as shm

        shm.set_shared_memory_region(self.handle, [x])

    def close(self, client: Any) -> None:
        import tritonclient.utils.shared_memory as shm

        try:
            client.unregister_system_shared_memory(self.name)
        except Exception:  # noqa: BLE001
            _log.debug("unregistering %s failed", self.name, exc_info=True)
        shm.destroy_shared_memory_region(self.handle)


def _client_module(spec: RemoteSpec) -> Any:
    """tritonclient's gRPC or HTTP module; it is an optional extra, so say how to get it."""
    try:
        if spec.grpc:
            import tritonclient.grpc as mod  # type: ignore[import-untyped]
        else:
            import tritonclient.http as mod  # type: ignore[import-untyped]
    except ImportError as e:
        raise BackendInitError(f"{spec.url} needs tritonclient: pip install 'inferstream[triton]' ({e})") from e
    return mod


def _new_client(spec: RemoteSpec) -> Any:
    mod = _client_module(spec)
    address = f"{spec.host}:{spec.port}" if ":" not in spec.host else f"[{spec.host}]:{spec.port}"
    ssl = spec.scheme in ("grpcs", "https")
    if spec.grpc:
        return mod.InferenceServerClient(address, ssl=ssl)
    return mod.InferenceServerClient(address, ssl=ssl, connection_timeout=spec.timeout, network_timeout=spec.timeout)


def _connect(spec: RemoteSpec) -> Any:
    """A client whose server is live and whose model is ready, or BackendInitError naming the URL."""
    client = _new_client(spec)
    try:
        live = _ask(spec, "reach the server", lambda **kw: client.is_server_live(**kw), attempts=1,
                    runtime=True)
    except InferenceServerError as e:
        raise BackendInitError(f"cannot reach the inference server at {spec.url}: is it running? ({e})") from None
    if not live or not _ask(spec, "check the model", lambda **kw: client.is_model_ready(
            spec.model, spec.version, **kw), attempts=1):
        raise BackendInitError(f"{spec.url}: the server is up but model {spec.model!r} is not ready; it has "
                               f"{_model_names(client, spec)}")
    return client


def _model_names(client: Any, spec: RemoteSpec) -> str:
    """The server's loaded models, for an error message: the repository index, else the statistics extension
    (PyTriton's server loads its models outside any repository, so only statistics lists them)."""
    as_json = {"as_json": True} if spec.grpc else {}
    names: set[str] = set()
    for ask in (client.get_model_repository_index, client.get_inference_statistics):
        try:
            answer = ask(**as_json)
        except Exception:  # noqa: BLE001
            _log.debug("%s: %s is not offered", spec.url, ask.__name__, exc_info=True)
            continue
        rows = answer if isinstance(answer, list) else answer.get("models") or answer.get("model_stats") or []
        names |= {str(m["name"]) for m in rows if m.get("state", "READY") == "READY"}
        if names:
            break
    return f"models {sorted(names)}" if names else "no model it will name"


def _model_config(client: Any, spec: RemoteSpec) -> dict[str, Any]:
    """Triton's model config (max_batch_size, parameters); only asked of a server with that extension."""
    as_json = {"as_json": True} if spec.grpc else {}
    config = _ask(spec, "read the model's config", lambda **kw: client.get_model_config(
        spec.model, spec.version, **as_json, **kw))
    return dict(config.get("config", config))


def _timeout_kw(spec: RemoteSpec) -> dict[str, float]:
    """gRPC takes a deadline per call; the HTTP client has its timeouts set once, at construction."""
    return {"client_timeout": spec.timeout} if spec.grpc else {}


def _ask(spec: RemoteSpec, what: str, call: Callable[..., Any], *, attempts: int | None = None,
         runtime: bool = False) -> Any:
    """``call()`` with a deadline; transport failures retried with a doubling pause, refusals raised at once."""
    tries = (spec.retries + 1) if attempts is None else attempts
    pause = 0.25
    for attempt in range(tries):
        try:
            return call(**_timeout_kw(spec))
        except Exception as exc:  # noqa: BLE001
            status = str(exc.status()) if hasattr(exc, "status") and callable(exc.status) else ""
            text = (exc.message() if hasattr(exc, "message") and callable(exc.message) else str(exc)) or repr(exc)
            if status in _REFUSED or attempt == tries - 1:
                done = "refused" if status in _REFUSED else f"failed after {tries} attempt(s)"
                err = InferenceServerError if runtime or status in _REFUSED else BackendInitError
                raise err(f"{spec.url}: {what} {done}: {text.strip().splitlines()[0] if text.strip() else text}") \
                    from None
            time.sleep(pause)
            pause *= 2
    raise AssertionError("unreachable")
