"""Load YAML and remember where every key came from, so config errors can name the line.

``load_yaml`` returns the plain data (as ``yaml.safe_load`` would) plus a :class:`LineMap` from key paths
(``("sources", 1, "file")``) to 1-based line numbers, built from the composed node tree's marks.
"""
from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import yaml

Path_ = tuple[Hashable, ...]


@dataclass
class LineMap:
    """Key path -> 1-based line of the key (mappings) or of the item (sequences)."""

    lines: dict[Path_, int] = field(default_factory=dict)
    duplicates: list[tuple[Path_, int]] = field(default_factory=list)

    def line_of(self, path: Path_) -> int | None:
        """The line of ``path``, else of its nearest ancestor that has one (None for an empty map)."""
        for end in range(len(path), -1, -1):
            if (line := self.lines.get(tuple(path[:end]))) is not None:
                return line
        return None


def _walk(node: yaml.Node, path: Path_, out: LineMap) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: set[Hashable] = set()
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else repr(key_node.value)
            child = (*path, key)
            if key in seen:
                out.duplicates.append((child, key_node.start_mark.line + 1))
            seen.add(key)
            out.lines[child] = key_node.start_mark.line + 1
            _walk(value_node, child, out)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            child = (*path, index)
            out.lines[child] = item.start_mark.line + 1
            _walk(item, child, out)


def load_yaml(text: str) -> tuple[Any, LineMap]:
    """Parse ``text``; returns (data, line map).

    Raises:
        yaml.YAMLError: on syntax errors (their ``problem_mark`` carries the line).
    """
    lines = LineMap()
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    if node is None:
        return None, lines
    lines.lines[()] = node.start_mark.line + 1
    _walk(node, (), lines)
    return yaml.safe_load(text), lines


def format_path(path: Path_) -> str:
    """``("sources", 1, "file")`` -> ``sources[1].file``."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"
