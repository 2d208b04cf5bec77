"""Broker fixtures for the element tests: the real-broker fixtures of tests/messaging, re-exported (not copied).

tests/messaging/conftest.py is loaded under its own module name; it puts tests/messaging on sys.path, so
``msg_servers`` and ``msg_subscribers`` import here too. A session that runs both directories starts each broker
once per directory (two fixture definitions), which costs a fraction of a second for mosquitto and redis.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parents[1] / "messaging" / "conftest.py"
_spec = importlib.util.spec_from_file_location("inferstream_tests_messaging_conftest", _PATH)
assert _spec is not None and _spec.loader is not None
_messaging = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _messaging
_spec.loader.exec_module(_messaging)

amqp_server = _messaging.amqp_server
fresh_server = _messaging.fresh_server
kafka_server = _messaging.kafka_server
mqtt_server = _messaging.mqtt_server
redis_server = _messaging.redis_server
server_for = _messaging.server_for
