"""Messages/s per broker: N DeepStream full-schema payloads through Publisher until the broker acknowledged all.

Starts its own mosquitto, redis-server, RabbitMQ and Tansu (Kafka) on loopback ports (tests/messaging/msg_servers.py),
skips a protocol whose server is not installed, prints a markdown table and writes bench/results/messaging.md.

    . .venv/bin/activate && python bench/messaging_throughput.py [--n 5000]
"""
from __future__ import annotations

import argparse
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests" / "messaging")]

from msg_servers import BINARIES, SERVERS

from inferstream.messaging.brokers import create_client, parse_conn_str
from inferstream.messaging.events import FrameEvent, ObjectEvent
from inferstream.messaging.publisher import Publisher
from inferstream.messaging.publisher_records import PublisherConfig
from inferstream.messaging.schema import MsgConverter


def payloads(n: int) -> list[bytes]:
    """n full-schema messages (one per object) from synthetic frames of 4 objects."""
    rng = random.Random(0)
    conv = MsgConverter("deepstream-full", frame_interval=1)
    out: list[bytes] = []
    frame = 0
    while len(out) < n:
        objs = []
        for _ in range(4):
            x, y = rng.uniform(0, 1800), rng.uniform(0, 1000)
            objs.append(ObjectEvent(rng.choice(["person", "car", "bicycle"]), 0, rng.random(),
                                    (x, y, x + rng.uniform(5, 100), y + rng.uniform(5, 60)), None, frame))
        out += conv.convert(FrameEvent("cam-0", 0, frame, frame * 33_333_333, time.time_ns(), 1920, 1080,
                                       tuple(objs)))
        frame += 1
    return out[:n]


def run(proto: str, port: int, msgs: list[bytes], batch_size: int, spool: Path, **options: object) -> tuple[float, int]:
    client = create_client(parse_conn_str(proto, f"127.0.0.1;{port}"), **options)
    pub = Publisher(client, PublisherConfig(spool_dir=spool, batch_size=batch_size, queue_size=len(msgs) + 1))
    pub.start()
    topic = f"bench-{proto}-{batch_size}"
    t0 = time.perf_counter()
    for m in msgs:
        pub.submit(topic, m, "cam-0")  # pymsgbroker keys every message with its stream id
    report = pub.flush(600)
    dt = time.perf_counter() - t0
    pub.close()
    return dt, report.delivered


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "messaging.md")
    args = ap.parse_args()
    msgs = payloads(args.n)
    avg = sum(map(len, msgs)) / len(msgs)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for proto in ("mqtt", "redis", "amqp", "kafka"):
            if BINARIES[proto] is None:
                rows.append(f"| {proto} | | - | - | - | - | server not installed |")
                continue
            server = SERVERS[proto](Path(tmp) / proto)
            server.start()
            try:
                variants: list[tuple[str, dict[str, object]]] = [("", {})]
                if proto == "amqp":
                    variants = [("confirm=tx", {"confirm": "tx"}), ("confirm=confirms", {"confirm": "confirms"})]
                for label, options in variants:
                    for batch in (256, 1):
                        spool = Path(tmp) / f"spool-{proto}-{label}-{batch}"
                        dt, delivered = run(proto, server.port, msgs, batch, spool, **options)
                        rows.append(f"| {proto} | {label} | {batch} | {delivered} | {dt:.2f} | "
                                    f"{delivered / dt:,.0f} | {delivered * avg / dt / 1e6:.1f} |")
                    print(rows[-1], flush=True)
            finally:
                server.close()
    head = ["| protocol | client option | batch | acknowledged | seconds | msgs/s | MB/s |",
            "|---|---|---:|---:|---:|---:|---:|"]
    cpu = platform.processor() or platform.machine()
    what = (f"{args.n} DeepStream full-schema payloads ({avg:.0f} B average) through `Publisher` (disk spool "
            "configured, broker up), timed from the first `submit` to `flush` returning with every message "
            "acknowledged (MQTT QoS-1 PUBACK, Redis XADD reply, AMQP `tx.commit-ok` or publisher confirm, Kafka "
            "delivery report of an idempotent `acks=all` producer; the Kafka broker is Tansu, memory storage). "
            "Every message carries the key `cam-0`. Brokers on loopback, started by the script; `batch` = messages per `publish_batch` (1 = one round trip per "
            "message).")
    machine = (f"Machine: {cpu}, {os.cpu_count()} CPUs, Python {platform.python_version()}. Numbers vary by "
               "+-30 % between runs on a shared VM.")
    text = "\n".join(["# Messaging throughput", "", what, "", machine, "", *head, *rows, ""])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print("\n".join(head + rows))


if __name__ == "__main__":
    main()
