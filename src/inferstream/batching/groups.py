"""The batch groups of this process by name: the pyinfers naming one group share its BatchGroup (one model, one
batch queue); the first to join loads the model, the last to leave closes it."""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from inferstream.batching import BatchGroup, Member
from inferstream.errors import ConfigError

if TYPE_CHECKING:
    from inferstream.inference import InferConfig

_GROUPS: dict[str, BatchGroup] = {}
_GROUPS_LOCK = threading.Lock()


def acquire_group(name: str, cfg: InferConfig, batch_size: int, max_latency_s: float) -> Member:
    """Join the group called ``name`` (created with a freshly loaded ModelStep when new).

    Raises:
        ConfigError: when the group exists with another model configuration.
    """
    from inferstream.inference import load_model_step

    with _GROUPS_LOCK:
        group = _GROUPS.get(name)
        if group is None:
            model = load_model_step(cfg)
            model.warmup(batch_size)
            group = _GROUPS[name] = BatchGroup(name, cfg, model, batch_size, max_latency_s)
        elif not group.cfg.same_model(cfg):
            raise ConfigError(f"batch-group {name!r} already runs model {group.cfg.model!r} "
                              f"({group.cfg.family}); this instance asks for {cfg.model!r} ({cfg.family})")
        return group.join()


def release_group(member: Member) -> None:
    """Leave the group (its tracker no longer tracks in its batches); the last member closes it."""
    if member.tracker is not None:
        member.tracker.leave()
    group = member.group
    with _GROUPS_LOCK:
        if group.release() == 0:
            _GROUPS.pop(group.name, None)
            group.close()
