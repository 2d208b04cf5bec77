"""Ports for the servers the tests start (brokers, Triton, MLServer, OpenAI-style VLM servers), one rule for all."""
from __future__ import annotations

import random
import socket
from pathlib import Path


def free_port() -> int:
    """A free port below the kernel's ephemeral range. Servers restarted on their port (the outage tests) and
    servers probed before they listen need it: a port from that range can meanwhile become the local end of a
    client's reconnect or of a probe that connects to itself, and the server then fails with EADDRINUSE (seen
    with RabbitMQ)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for port in random.sample(range(20000, max(low, 20001)), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # everything below the range is taken: any free port
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
