"""``python -m inferstream.model_server``: the server's command line (the package's docstring says what it does).

Prints one JSON line ``{"ready": ...}`` once the model is loaded (the app waits for it), ``{"stats": ...}`` every
second (forwards, frames, workers connected: the app's metrics), ``{"note": ...}`` for its console (the graphs it
captured, in how long) and one line of counts at exit; SIGTERM or SIGINT stops it. With ``--die-with-parent`` (the
app's server) the death of the app makes it serve its workers until they have finished their streams and gone, then
end: it is never left running. A model that fails to load is one line on stderr and exit code 2.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
from multiprocessing.connection import Listener
from pathlib import Path
from typing import TYPE_CHECKING

from inferstream.model_server import ModelServer, say
from inferstream.model_server import __doc__ as server_doc
from inferstream.model_thread import ModelThread
from inferstream.native.process import die_with_parent

if TYPE_CHECKING:
    from inferstream.backends.base import Backend


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m inferstream.model_server",
                                 description=(server_doc or "").split("\n\n")[0])
    ap.add_argument("--listen", required=True, help="the socket path workers connect to (model=ipc://PATH)")
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--graph", default="auto")
    ap.add_argument("--trust-checkpoint", action="store_true")
    ap.add_argument("--max-batch", type=int, default=32)
    ap.add_argument("--delay-ms", type=float, default=0.0)
    ap.add_argument("--capture", choices=("powers-of-two", "every-sum"), default="powers-of-two",
                    help="on a GPU, the batch sizes to capture CUDA graphs for: powers of two up to max-batch (a "
                    "forward runs on the cheapest cover by them), or also every sum of whole requests (a longer "
                    "start)")
    ap.add_argument("--mps-priority", choices=("normal", "below-normal"), default="normal",
                    help="the server's scheduling priority as a CUDA MPS client: below-normal lets the workers' own "
                    "kernels (letterbox, decoding) run ahead of its forwards")
    ap.add_argument("--die-with-parent", action="store_true", help="when the process that started it dies, end "
                    "once its workers are gone (the app's own server)")
    args = ap.parse_args(argv)
    if args.die_with_parent:  # the workers finish their streams when the app dies: serve them until they are gone
        die_with_parent(signal.SIGUSR1)
    # read when CUDA starts, which loading the model does; set either way: the app's workers may run below normal
    os.environ["CUDA_MPS_CLIENT_PRIORITY"] = "1" if args.mps_priority == "below-normal" else "0"
    thread = ModelThread("model-server-model")
    try:
        return _serve(args, thread)
    finally:
        thread.close(wait=True)  # a thread still ending while the runtime tears down can abort the process


def _serve(args: argparse.Namespace, thread: ModelThread) -> int:
    """Load the model (a CPU one on ``thread``, which will run it: one OpenMP pool) and serve until stopped."""
    from inferstream.backends.loader import load_backend
    from inferstream.errors import InferstreamError

    def load() -> Backend:
        return load_backend(args.model, device=args.device, precision=args.precision, backend=args.backend,
                            trust_checkpoint=args.trust_checkpoint, graph=args.graph)

    try:
        backend = thread.run(load) if args.device.split(":")[0] == "cpu" else load()
    except InferstreamError as exc:
        print(f"model server: cannot load {args.model}: {exc}", file=sys.stderr)
        return 2
    server = ModelServer(backend, max(1, args.max_batch), max(0.0, args.delay_ms) / 1000,
                         every_sum=args.capture == "every-sum", thread=thread)
    Path(args.listen).unlink(missing_ok=True)
    listener = Listener(args.listen, family="AF_UNIX")
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: server.stop())
    signal.signal(signal.SIGUSR1, lambda *_: server.drain())
    say({"ready": args.listen, "device": str(backend.device)})
    server.serve(listener)
    say({**server.counts(), "workers": server.served})
    backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
