"""The ``inferstream`` command: run | demo | bench | env | doctor.

Exit codes (also in README and ``--help``): 0 done; 1 a stream failed, or the run could not start; 2 invalid
config or usage; 3 events lost (dropped by drop-policy or undelivered at stop); 70 internal error (a bug);
128 + N stopped by signal N after finishing the files (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP).
Every error prints one line (what, where, how to fix) with credentials redacted; ``--debug`` adds the traceback.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

EXIT_CONFIG = 2
EXIT_INTERNAL = 70  # EX_SOFTWARE
EXIT_CODES = ("exit codes: 0 done, 1 a stream failed or the run could not start, 2 invalid config or usage, "
              "3 events lost, 70 internal error, 128+N stopped by signal N (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP)")


def _workers_arg(text: str) -> int | str:
    if text == "auto":
        return text
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, or auto (got {text!r})")
    return int(text)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="inferstream", description="Video analytics pipelines from a YAML config.",
                                 epilog=EXIT_CODES)
    ap.add_argument("--debug", action="store_true", help="show Python tracebacks of errors")
    sub = ap.add_subparsers(dest="command", required=True)

    def debug_option(p: argparse.ArgumentParser) -> None:  # also accepted after the command
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show Python tracebacks")

    def live_options(p: argparse.ArgumentParser) -> None:
        debug_option(p)
        p.add_argument("--metrics-port", type=int, metavar="PORT",
                       help="serve Prometheus metrics on http://127.0.0.1:PORT/metrics (0: any free port)")
        p.add_argument("--console", choices=("auto", "rich", "plain", "quiet"), default="auto",
                       help="live display: rich table on a terminal, plain lines, or only the summary")
        p.add_argument("--interval", type=float, default=2.0, metavar="S", help="seconds between plain lines")
        p.add_argument("--eos-timeout", type=float, default=10.0, metavar="S",
                       help="after Ctrl-C / SIGTERM / SIGHUP, how long the streams may take to finish their files")

    run = sub.add_parser("run", help="run a pipeline config")
    run.add_argument("config", type=Path, help="YAML config (see examples/)")
    run.add_argument("--print-pipeline", action="store_true",
                     help="print the gst-launch-1.0 line (conn-str passwords as ***) and exit")
    run.add_argument("--workers", type=_workers_arg, metavar="N|auto",
                     help="worker processes to shard the sources over (default: the config's workers, 1)")
    run.add_argument("--mps", choices=("auto", "on", "off"),
                     help="CUDA MPS daemon for 2+ workers on CUDA, so their kernels share the GPU (default: the "
                     "config's mps, auto: on when nvidia-cuda-mps-control is installed)")
    run.add_argument("--cluster", metavar="ADDRESS",
                     help="run the workers as Ray actors on the cluster at HOST:PORT (its head), ray://HOST:PORT "
                          "(Ray Client) or auto (default: the config's cluster.address; needs the cluster extra)")
    live_options(run)

    demo = sub.add_parser("demo", help="vtest.avi + person detector (+ tracker) + OSD -> MP4 and events.jsonl")
    demo.add_argument("--frames", type=int, metavar="N", help="only the first N frames (default: the whole clip)")
    demo.add_argument("--output", type=Path, default=Path("inferstream-demo"), metavar="DIR",
                      help="where demo.mp4 and events.jsonl go (default: inferstream-demo)")
    live_options(demo)

    sub.add_parser("env", help='print the exports that let GStreamer find our elements: eval "$(inferstream env)"')
    doctor = sub.add_parser("doctor", help="check GStreamer, GstAnalytics, the python loader, our elements, torch's "
                            "device and NVDEC; one line per problem says what to install")
    debug_option(doctor)
    bench = sub.add_parser("bench", help="run the scripts in bench/ and print their tables")
    debug_option(bench)
    bench.add_argument("--dir", type=Path, help="folder of benchmark scripts (default: the repository's bench/)")
    bench.add_argument("--only", metavar="NAME", help="only scripts whose name contains NAME")
    bench.add_argument("--out", type=Path, metavar="FILE", help="also write the markdown to FILE (BENCHMARKS.md)")
    bench.add_argument("script_args", nargs=argparse.REMAINDER, help="arguments for every script (after --)")
    return ap


def _run(args: argparse.Namespace) -> int:
    from inferstream.app.cluster import cluster_address, run_cluster
    from inferstream.app.config import load_config
    from inferstream.app.console import make_console
    from inferstream.app.layout import auto_layout, worker_count
    from inferstream.app.pipeline import build_plan, launch_line
    from inferstream.app.workers import run_config
    from inferstream.messaging.brokers.base import ENV_PASSWORD, redact_credentials

    cfg = load_config(args.config)
    if args.mps:
        cfg = cfg.model_copy(update={"mps": args.mps})
    plan = build_plan(cfg)
    if args.print_pipeline:
        line = launch_line(plan)
        print(redact_credentials(line))
        if redact_credentials(line) != line:
            print(f"inferstream: passwords shown as ***: give them to gst-launch-1.0 in {ENV_PASSWORD} (or a "
                  "credentials file: pymsgbroker config=...)", file=sys.stderr)
        return 0
    address = cluster_address(args.cluster, cfg)
    if address is not None:
        return run_cluster(cfg, address, args.workers, lambda: make_console(args.console, args.interval),
                           args.metrics_port, args.eos_timeout, args.debug).exit_code
    laid_out = auto_layout(cfg, args.workers)
    count = worker_count(args.workers, laid_out)
    console = make_console(args.console, args.interval)
    return run_config(laid_out, count, console, args.metrics_port, args.eos_timeout,
                      plan=plan if laid_out is cfg else None).exit_code


def _demo(args: argparse.Namespace) -> int:
    from inferstream.app.demo import demo

    if args.frames is not None and args.frames < 1:
        print("inferstream demo: --frames must be at least 1", file=sys.stderr)
        return EXIT_CONFIG
    return demo(args.frames, args.output, args.console, args.metrics_port, args.interval, args.eos_timeout)


def _bench(args: argparse.Namespace) -> int:
    from inferstream.app.bench import bench

    extra = args.script_args[1:] if args.script_args[:1] == ["--"] else args.script_args
    return bench(args.dir, args.out, args.only, extra)


def _env(_args: argparse.Namespace) -> int:
    from inferstream.app.doctor import env_lines

    print("\n".join(env_lines()))
    return 0


def _doctor(_args: argparse.Namespace) -> int:
    from inferstream.app.doctor import doctor

    return doctor()


def _say(text: str) -> None:
    from inferstream.messaging.brokers.base import redact_credentials

    print(f"inferstream: {redact_credentials(text)}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return {"run": _run, "demo": _demo, "bench": _bench, "env": _env, "doctor": _doctor}[args.command](args)
    except KeyboardInterrupt:
        _say("interrupted")
        return 130
    except Exception as exc:  # noqa: BLE001
        # imported here: env and doctor must run where the dependencies (pydantic) are what is broken
        from inferstream.app.config import ConfigFileError
        from inferstream.errors import InferstreamError

        if args.debug:
            import traceback

            traceback.print_exc()
        if isinstance(exc, ConfigFileError):
            _say(str(exc))
            return EXIT_CONFIG
        if isinstance(exc, InferstreamError):
            _say(str(exc))
        elif isinstance(exc, OSError):
            where = f"{exc.filename}: " if exc.filename else ""
            _say(f"{where}{exc.strerror or exc}")
        else:
            _say(f"internal error: {type(exc).__name__}: {exc}"
                 + ("" if args.debug else " (run with --debug for the traceback, and please report it)"))
            return EXIT_INTERNAL
        return 1


if __name__ == "__main__":
    sys.exit(main())
