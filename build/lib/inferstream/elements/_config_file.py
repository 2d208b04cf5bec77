"""pyinfer's ``config-file``: an nvinfer config file fills the properties the user did not set (as in nvinfer,
properties set on the element win over the file)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from inferstream.elements._errors import post_warning
from inferstream.errors import ConfigError

if TYPE_CHECKING:
    from gi.repository import GObject, Gst


class ConfigFile:
    """Remembers which properties were set explicitly (``notify``) and applies the file over the others."""

    def __init__(self, element: Gst.Element) -> None:
        self._element = element
        self._explicit: set[str] = set()
        self._applying = False
        element.connect("notify", self._on_notify)

    def _on_notify(self, _element: Gst.Element, pspec: GObject.ParamSpec) -> None:
        if not self._applying:
            self._explicit.add(pspec.name)

    def apply(self, path: str) -> tuple[tuple[int, float], ...]:
        """Read ``path`` (nothing when empty), set the properties it gives that were not set explicitly, post one
        warning naming the keys it ignores (and one per note).

        Returns:
            the per-class thresholds for ``DecodeParams.class_conf``.

        Raises:
            ConfigError: the file cannot be read or used (see ``read_nvinfer_config``).
        """
        if not path:
            return ()
        from inferstream.nvinfer_config import read_nvinfer_config

        settings = read_nvinfer_config(path)
        self._applying = True
        try:
            for name, value in settings.properties.items():
                if name not in self._explicit:
                    self._element.set_property(name, value)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ConfigError(f"config-file {path!r}: {name}={value!r}: {exc}") from None
        finally:
            self._applying = False
        if settings.ignored:
            post_warning(self._element, ConfigError(", ".join(settings.ignored)),
                         f"config-file {path!r}: keys without a meaning in inferstream, ignored")
        for note in settings.notes:
            post_warning(self._element, ConfigError(note), f"config-file {path!r}")
        return settings.class_conf
