"""Backends that answer VlmRequests: a local transformers folder in-process, or any OpenAI-compatible server.

Both implement ``answer(requests) -> list[VlmAnswer]``: one answer per request, in order; a request that fails
gets an answer with ``error`` set (the others are still answered). Heavy imports (torch, transformers, PIL) happen
in the functions that need them.
"""
from __future__ import annotations

import base64
import io
import json
import os
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from inferstream.errors import ConfigError, ModelNotFoundError, UnsupportedModelError
from inferstream.vlm.types import VlmAnswer, VlmRequest, VlmRequestError

if TYPE_CHECKING:
    import numpy as np

API_KEY_ENV: Final = "INFERSTREAM_VLM_API_KEY"
DTYPES: Final = ("auto", "float32", "float16", "bfloat16")


class VlmBackend(Protocol):
    concurrency: int  # requests the service may have in flight at once (1 for a batched in-process model)
    name: str

    def answer(self, requests: list[VlmRequest]) -> list[VlmAnswer]: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class BackendConfig:
    """What selects and configures a backend (read from the element's properties once)."""

    kind: str  # "transformers" | "openai"
    model: str  # a folder (transformers) or the server's model name (openai)
    device: str = "cpu"
    dtype: str = "auto"
    max_new_tokens: int = 32
    server_url: str = ""
    timeout_s: float = 30.0
    retries: int = 2
    concurrency: int = 4
    image_format: str = "jpeg"
    max_image_pixels: int = 4096 * 4096


def load_backend(cfg: BackendConfig) -> VlmBackend:
    """The backend ``cfg`` names.

    Raises:
        ModelNotFoundError: the transformers folder does not exist.
        UnsupportedModelError: the folder is not a vision-language model.
        ConfigError: unknown kind or dtype, or no server URL.
    """
    if cfg.kind == "transformers":
        return TransformersBackend(cfg)
    if cfg.kind == "openai":
        return OpenAIBackend(cfg)
    raise ConfigError(f"backend={cfg.kind!r}: expected 'transformers' or 'openai'")


def check_image(image: np.ndarray, max_pixels: int) -> None:
    """Raises VlmRequestError (kind ``image``) when ``image`` ([H, W, 3]) is larger than the model accepts."""
    h, w = image.shape[:2]
    if h * w > max_pixels:
        raise VlmRequestError("image", f"image {w}x{h} ({w * h} pixels) exceeds max-image-pixels={max_pixels}")
    if h < 1 or w < 1:
        raise VlmRequestError("image", f"empty image {w}x{h}")


def parse_json_answer(text: str, schema: dict[str, Any] | None) -> Any:
    """The answer parsed as JSON and validated against ``schema`` (jsonschema, when installed).

    Raises:
        VlmRequestError: kind ``json``, the answer is not JSON or does not match the schema.
    """
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise VlmRequestError("json", f"answer is not JSON ({exc}): {text[:80]!r}") from exc
    try:
        import jsonschema  # type: ignore[import-untyped]
    except ImportError:
        return value
    try:
        jsonschema.validate(value, schema or {})
    except jsonschema.ValidationError as exc:
        raise VlmRequestError("json", f"answer does not match the JSON schema: {exc.message}") from exc
    return value


def _finish(request: VlmRequest, text: str, started: float) -> VlmAnswer:
    """The answer for ``text``, JSON-checked when the request asked for a schema."""
    latency = time.monotonic() - started
    if request.json_schema is None:
        return VlmAnswer(request, text=text, latency_s=latency)
    try:
        return VlmAnswer(request, text=text, latency_s=latency, json_value=parse_json_answer(text, request.json_schema))
    except VlmRequestError as exc:
        return VlmAnswer(request, text=text, error=exc, latency_s=latency)


# -- in-process transformers ------------------------------------------------------------------------------------
class TransformersBackend:
    """Any folder that ``AutoModelForImageTextToText`` and ``AutoProcessor`` load; greedy, batched generation."""

    concurrency = 1

    def __init__(self, cfg: BackendConfig) -> None:
        import torch
        from transformers import AutoModelForImageTextToText, AutoProcessor

        folder = Path(cfg.model)
        if not folder.is_dir():
            raise ModelNotFoundError(f"VLM model folder {cfg.model!r} does not exist")
        if cfg.dtype not in DTYPES:
            raise ConfigError(f"dtype={cfg.dtype!r}: expected one of {list(DTYPES)}")
        try:
            self.processor = AutoProcessor.from_pretrained(folder)
            dtype = "auto" if cfg.dtype == "auto" else getattr(torch, cfg.dtype)
            # use_kernels=False: transformers >= 5.25 turns hub kernels on by default, which needs the `kernels`
            # package and a download; a pipeline loads its folder offline, as it is
            model = AutoModelForImageTextToText.from_pretrained(folder, dtype=dtype, use_kernels=False)
            self.model = model.to(cfg.device).eval()  # type: ignore[arg-type]  # transformers' stub
        except Exception as exc:  # transformers raises ValueError/OSError/KeyError/...: all mean "not a VLM here"
            raise UnsupportedModelError(f"{cfg.model}: not a vision-language model that AutoModelForImageTextToText "
                                        f"and AutoProcessor load ({type(exc).__name__}: {exc})") from exc
        tokenizer = getattr(self.processor, "tokenizer", None)
        if tokenizer is not None:
            tokenizer.padding_side = "left"  # batched generation appends after the prompt
        self.name, self._cfg = folder.name, cfg

    def prompt_text(self, request: VlmRequest) -> str:
        """The processor's chat template applied to the request's images and text.

        Raises:
            VlmRequestError: kind ``prompt``, the chat template failed.
        """
        text = request.prompt
        if request.json_schema is not None:
            text = f"{text} Answer with JSON matching this schema: {json.dumps(request.json_schema)}"
        content: list[dict[str, str]] = [{"type": "image"} for _ in request.images]
        messages = [{"role": "user", "content": [*content, {"type": "text", "text": text}]}]
        try:
            return str(self.processor.apply_chat_template(messages, add_generation_prompt=True))
        except Exception as exc:  # jinja2 errors, a processor without a template
            raise VlmRequestError("prompt", f"chat template failed: {type(exc).__name__}: {exc}") from exc

    def answer(self, requests: list[VlmRequest]) -> list[VlmAnswer]:
        started = time.monotonic()
        ready: list[tuple[VlmRequest, str]] = []
        out: dict[int, VlmAnswer] = {}
        for i, req in enumerate(requests):
            try:
                for image in req.images:
                    check_image(image, self._cfg.max_image_pixels)
                ready.append((req, self.prompt_text(req)))
            except VlmRequestError as exc:
                out[i] = VlmAnswer(req, error=exc)
        if ready:
            texts: list[str | VlmRequestError]
            try:
                texts = list(self._generate(ready))
            except Exception:  # noqa: BLE001
                texts = [self._generate_one(item) for item in ready]
            todo = iter(texts)
            for i, req in enumerate(requests):
                if i not in out:
                    text = next(todo)
                    out[i] = (VlmAnswer(req, error=text, latency_s=time.monotonic() - started)
                              if isinstance(text, VlmRequestError) else _finish(req, text, started))
        return [out[i] for i in range(len(requests))]

    def _generate_one(self, item: tuple[VlmRequest, str]) -> str | VlmRequestError:
        try:
            return self._generate([item])[0]
        except Exception as exc:  # noqa: BLE001
            return VlmRequestError("model", f"generate failed: {type(exc).__name__}: {exc}")

    def _generate(self, ready: list[tuple[VlmRequest, str]]) -> list[str]:
        import torch

        images = [image for req, _ in ready for image in req.images]
        inputs = self.processor(images=images, text=[p for _, p in ready], padding=True, return_tensors="pt")
        inputs = inputs.to(self.model.device)
        if "pixel_values" in inputs and self.model.dtype != inputs["pixel_values"].dtype:
            inputs["pixel_values"] = inputs["pixel_values"].to(self.model.dtype)
        with torch.inference_mode():
            out = self.model.generate(**inputs, max_new_tokens=self._cfg.max_new_tokens, do_sample=False)
        new = out[:, inputs["input_ids"].shape[1]:]
        return list(self.processor.batch_decode(new, skip_special_tokens=True))

    def close(self) -> None:
        del self.model


# -- any OpenAI-compatible server ---------------------------------------------------------------------------------
def data_url(image: np.ndarray, fmt: str) -> str:
    """``image`` ([H, W, 3] uint8 RGB) as a ``data:image/...;base64,`` URL (PNG: lossless; JPEG: quality 90)."""
    from PIL import Image

    out = io.BytesIO()
    if fmt == "png":
        Image.fromarray(image).save(out, format="PNG")
    else:
        Image.fromarray(image).save(out, format="JPEG", quality=90)
    return f"data:image/{fmt};base64,{base64.b64encode(out.getvalue()).decode()}"


class OpenAIBackend:
    """POST /chat/completions to ``server-url``: images as data URLs, ``concurrency`` requests at once, a timeout
    per attempt, ``retries`` more attempts (with backoff) on connection errors, timeouts and 5xx."""

    def __init__(self, cfg: BackendConfig) -> None:
        if not cfg.server_url.startswith(("http://", "https://")):
            raise ConfigError(f"server-url={cfg.server_url!r}: expected http(s)://host:port/v1")
        if cfg.image_format not in ("jpeg", "png"):
            raise ConfigError(f"image-format={cfg.image_format!r}: expected 'jpeg' or 'png'")
        self._cfg, self.name, self.concurrency = cfg, cfg.model, cfg.concurrency
        self._url = cfg.server_url.rstrip("/") + "/chat/completions"
        self._pool = ThreadPoolExecutor(cfg.concurrency, thread_name_prefix="pyvlm-http")
        self._headers = {"Content-Type": "application/json"}
        if key := os.environ.get(API_KEY_ENV):
            self._headers["Authorization"] = f"Bearer {key}"

    def answer(self, requests: list[VlmRequest]) -> list[VlmAnswer]:
        if len(requests) == 1:
            return [self._one(requests[0])]
        return list(self._pool.map(self._one, requests))

    def body(self, request: VlmRequest) -> dict[str, Any]:
        """The chat-completions request body (greedy: temperature 0)."""
        for image in request.images:
            check_image(image, self._cfg.max_image_pixels)
        content: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": data_url(im, self._cfg.image_format)}}
                                         for im in request.images]
        content.append({"type": "text", "text": request.prompt})
        body: dict[str, Any] = {"model": self._cfg.model, "messages": [{"role": "user", "content": content}],
                                "max_tokens": self._cfg.max_new_tokens, "temperature": 0, "stream": False}
        if request.json_schema is not None:
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "answer", "schema": request.json_schema}}
        return body

    def _one(self, request: VlmRequest) -> VlmAnswer:
        started = time.monotonic()
        try:
            data = json.dumps(self.body(request)).encode()
            reply = self._post(data)
        except VlmRequestError as exc:
            return VlmAnswer(request, error=exc, latency_s=time.monotonic() - started)
        try:
            text = reply["choices"][0]["message"]["content"]
            if not isinstance(text, str):
                raise TypeError(f"content is {type(text).__name__}")
        except (KeyError, IndexError, TypeError) as exc:
            err = VlmRequestError("garbage", f"server answered without choices[0].message.content ({exc}): "
                                             f"{json.dumps(reply)[:120]}")
            return VlmAnswer(request, error=err, latency_s=time.monotonic() - started)
        return _finish(request, text, started)

    def _post(self, data: bytes) -> Any:
        """The decoded JSON reply; retried on transient failures."""
        last: VlmRequestError | None = None
        for attempt in range(self._cfg.retries + 1):
            if attempt:
                time.sleep(min(0.2 * 2 ** (attempt - 1), 2.0))
            req = urllib.request.Request(self._url, data, self._headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self._cfg.timeout_s) as resp:
                    raw = resp.read()
            except urllib.error.HTTPError as exc:
                detail = exc.read()[:200].decode(errors="replace")
                last = VlmRequestError("server", f"{self._url}: HTTP {exc.code}: {detail}")
                if exc.code < 500:
                    raise last from exc  # the request itself is wrong (too large, bad model): no retry
                continue
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                kind = "timeout" if isinstance(reason, TimeoutError) or "timed out" in str(reason) else "server"
                last = VlmRequestError(kind, f"{self._url}: {reason} (after {attempt + 1} attempts)")
                continue
            try:
                return json.loads(raw)
            except ValueError as exc:
                raise VlmRequestError("garbage", f"{self._url} answered non-JSON: {raw[:80]!r}") from exc
        raise last or VlmRequestError("server", f"{self._url}: no attempt made")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
