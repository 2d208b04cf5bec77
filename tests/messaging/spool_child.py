"""Child process of test_spool_survives_kill_9: spool N messages with the broker down, say so, wait for SIGKILL."""
from __future__ import annotations

import json
import sys
import time

from inferstream.messaging.brokers import create_client, parse_conn_str
from inferstream.messaging.publisher import Publisher
from inferstream.messaging.publisher_records import PublisherConfig


def main() -> None:
    proto, conn_str, spool, topic, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
    client = create_client(parse_conn_str(proto, conn_str))
    # memory_messages=0: while disconnected every message goes straight to disk
    pub = Publisher(client, PublisherConfig(spool_dir=spool, memory_messages=0, backoff_initial=5.0,
                                            backoff_max=5.0, connect_timeout=0.5))
    pub.start()
    for i in range(n):
        while not pub.submit(topic, json.dumps({"seq": i, "pad": "x" * 200}).encode()):
            time.sleep(0.001)
    while pub.stats().in_spool < n:
        time.sleep(0.01)
    print(f"SPOOLED {n}", flush=True)
    time.sleep(3600)  # the test kills us here


if __name__ == "__main__":
    main()
