"""A small real OpenAI-compatible server for the tests: ``python vlm_server.py PORT MODE [FOLDER DELAY_S]``.

MODE ``slow``: answers /v1/chat/completions with the tiny model in FOLDER (inferstream's transformers backend on the
decoded data-URL images), after sleeping DELAY_S per request: a deliberately slow model. MODE ``garbage``: answers
every request with bytes that are not JSON, and ``nochoices`` with JSON lacking ``choices``: servers gone wrong.
"""
from __future__ import annotations

import base64
import io
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> None:
    port, mode = int(sys.argv[1]), sys.argv[2]
    backend = None
    if mode == "slow":
        import numpy as np

        from inferstream.vlm.backends import BackendConfig, TransformersBackend
        from inferstream.vlm.types import VlmRequest

        backend = TransformersBackend(BackendConfig("transformers", sys.argv[3], max_new_tokens=4))
        backend.answer([VlmRequest((np.zeros((8, 8, 3), np.uint8),), "warm up", "", 0, 0)])  # before it is healthy
    delay = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self._send(200, b'{"status":"ok"}')

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if mode == "garbage":
                return self._send(200, b"<html>502 upstream gone</html>")
            if mode == "nochoices":
                return self._send(200, b'{"object":"chat.completion","error":null}')
            text = self._answer(body)
            self._send(200, json.dumps({"object": "chat.completion", "choices": [
                {"index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": text}}]}).encode())

        def _answer(self, body: dict) -> str:
            import numpy as np
            from PIL import Image

            from inferstream.vlm.types import VlmRequest

            content = body["messages"][0]["content"]
            images = tuple(np.asarray(Image.open(io.BytesIO(base64.b64decode(c["image_url"]["url"].split(",", 1)[1])))
                                      .convert("RGB")) for c in content if c["type"] == "image_url")
            prompt = next(c["text"] for c in content if c["type"] == "text")
            time.sleep(delay)
            with lock:
                return backend.answer([VlmRequest(images, prompt, "", 0, 0)])[0].text  # type: ignore[union-attr]

        def _send(self, code: int, data: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


if __name__ == "__main__":
    main()
