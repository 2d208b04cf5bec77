"""Check config values against a real GStreamer element's properties and write them in gst-launch syntax.

The element is looked up in the registry (``Gst.ElementFactory.find``) and one instance is made to read its
``GParamSpec``s, so the rules are the element's own: ranges, enum nicks, read-only properties.
"""
from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, cast

import gi

gi.require_version("Gst", "1.0")
from gi.repository import GObject, Gst

_SKIP: Final = frozenset({"name", "parent"})
_INT_TYPES: Final = ("gint", "guint", "gint64", "guint64", "glong", "gulong", "gchar", "guchar")


def ensure_gst() -> None:
    """``Gst.init`` on first use, not at import: importing the app (``inferstream --help``, its tests) starts no
    GStreamer."""
    if not Gst.is_initialized():
        Gst.init(None)


@dataclass(frozen=True, slots=True)
class PropSpec:
    """What a writable property accepts. ``kind``: string, int, float, bool, enum, flags or other."""

    name: str
    kind: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.kind in ("int", "float"):
            return f"{self.kind} {_num(self.minimum)}..{_num(self.maximum)}"
        if self.kind in ("enum", "flags"):
            return f"{self.kind}: {' | '.join(self.choices)}"
        return self.kind


def _num(value: float | None) -> str:
    return "?" if value is None else (str(int(value)) if float(value).is_integer() else f"{value:g}")


def _enum_nicks(pspec: GObject.ParamSpec) -> tuple[str, ...]:
    klass = pspec.enum_class
    if isinstance(klass, type):  # PyGObject >= 3.51: a Python IntEnum of exactly the values
        return tuple(v.value_nick for v in cast("Iterable[Any]", klass))
    lo, hi = klass.minimum, klass.maximum  # older: the C GEnumClass
    if hi - lo > 4096:  # sparse enums: only the default is sure to exist
        value = GObject.enum_get_value(klass, pspec.default_value)
        return (value.value_nick,) if value else ()
    return tuple(v.value_nick for i in range(lo, hi + 1) if (v := GObject.enum_get_value(klass, i)))


def _flag_nicks(pspec: GObject.ParamSpec) -> tuple[str, ...]:
    klass, bit, nicks = pspec.flags_class, 1, []
    if isinstance(klass, type):  # PyGObject >= 3.51: a Python IntFlag; iterating it yields the single bits
        return tuple(v.value_nicks[0] for v in cast("Iterable[Any]", klass))
    while bit <= klass.mask:
        if (value := GObject.flags_get_first_value(klass, bit)) is not None:
            nicks.append(value.value_nick)
        bit <<= 1
    return tuple(nicks)


def _spec(pspec: GObject.ParamSpec) -> PropSpec:
    vtype = pspec.value_type
    fundamental = vtype.fundamental.name
    if fundamental == "gchararray":
        return PropSpec(pspec.name, "string")
    if fundamental == "gboolean":
        return PropSpec(pspec.name, "bool")
    if fundamental in _INT_TYPES:
        return PropSpec(pspec.name, "int", pspec.minimum, pspec.maximum)
    if fundamental in ("gdouble", "gfloat"):
        return PropSpec(pspec.name, "float", pspec.minimum, pspec.maximum)
    if fundamental == "GEnum":
        return PropSpec(pspec.name, "enum", choices=_enum_nicks(pspec))
    if fundamental == "GFlags":
        return PropSpec(pspec.name, "flags", choices=_flag_nicks(pspec))
    return PropSpec(pspec.name, "other")


def element_available(factory_name: str) -> bool:
    ensure_gst()
    return Gst.ElementFactory.find(factory_name) is not None


@functools.cache
def element_properties(factory_name: str) -> dict[str, PropSpec] | None:
    """Writable properties of ``factory_name`` by name; None when the element is not registered."""
    ensure_gst()
    if Gst.ElementFactory.find(factory_name) is None:
        return None
    element = Gst.ElementFactory.make(factory_name, None)
    if element is None:
        return None
    writable = GObject.ParamFlags.WRITABLE
    construct_only = GObject.ParamFlags.CONSTRUCT_ONLY
    return {p.name: _spec(p) for p in element.list_properties()
            if p.flags & writable and not p.flags & construct_only and p.name not in _SKIP}


def _quote(text: str) -> str:
    """A value as gst-launch / parse_launch reads it (and a POSIX shell passes it on unchanged)."""
    if text and all(c.isalnum() or c in "/._-,:+=@%^" for c in text):
        return text
    escaped = "".join("\\" + c if c in '"\\$`' else c for c in text)
    return f'"{escaped}"'


def _scalar_text(value: Any) -> str:
    if isinstance(value, bool) or value is None or isinstance(value, (dict, list)):
        raise ValueError(f"expected a string, got {value!r}")
    return str(value)


def to_launch_value(spec: PropSpec, value: Any) -> str:
    """Check ``value`` against ``spec``; returns it in gst-launch syntax (quoted when needed).

    Raises:
        ValueError: the message says what the property accepts.
    """
    kind = spec.kind
    if kind == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {value!r}")
        return "true" if value else "false"
    if kind in ("int", "float"):
        ok = isinstance(value, int) if kind == "int" else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok:
            raise ValueError(f"expected {'an integer' if kind == 'int' else 'a number'}, got {value!r}")
        if (spec.minimum is not None and value < spec.minimum) or (spec.maximum is not None and value > spec.maximum):
            raise ValueError(f"{value} is outside {_num(spec.minimum)}..{_num(spec.maximum)}")
        return str(value)
    if kind == "enum":
        text = str(value) if not isinstance(value, bool) else ""
        if text not in spec.choices:
            raise ValueError(f"{value!r} is not one of {', '.join(spec.choices)}")
        return _quote(text)
    if kind == "flags":
        parts = value if isinstance(value, list) else str(value).split("+")
        bad = [p for p in parts if str(p) not in spec.choices]
        if bad or not parts:
            raise ValueError(f"{bad or value!r}: expected flags joined by + from {', '.join(spec.choices)}")
        return _quote("+".join(str(p) for p in parts))
    if isinstance(value, list):  # e.g. labels: [red, green, blue] -> "red,green,blue"
        return _quote(",".join(_scalar_text(v) for v in value))
    return _quote(_scalar_text(value))


def check_properties(factory_name: str, values: Mapping[str, Any]) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """Validate ``values`` (property -> YAML value) for ``factory_name``.

    Returns:
        (launch values by canonical property name, problems as (key as written, message)). An element that is not
        registered gives one problem with key ``""``.
    """
    specs = element_properties(factory_name)
    if specs is None:
        where = os.environ.get("GST_PLUGIN_PATH", "")
        return {}, [("", (f"GStreamer element {factory_name!r} is not available (not registered; "
                         f"GST_PLUGIN_PATH={where or 'unset'}): gst-inspect-1.0 {factory_name} says why"))]
    out: dict[str, str] = {}
    problems: list[tuple[str, str]] = []
    for key, value in values.items():
        name = str(key).replace("_", "-")
        spec = specs.get(name)
        if spec is None:
            problems.append((key, unknown_key_message(f"{factory_name} has no writable property {key!r}",
                                                      str(key), sorted(specs))))
            continue
        try:
            out[name] = to_launch_value(spec, value)
        except ValueError as exc:
            problems.append((key, f"{factory_name}.{name} ({spec.describe()}): {exc}"))
    return out, problems


def unknown_key_message(head: str, key: str, valid: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(key.replace("_", "-"), valid, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"{head}{hint} Valid: {', '.join(valid)}"


@functools.cache
def decoder_works(factory_name: str) -> bool:
    """True when ``factory_name`` is registered and reaches READY (for nvh264dec: a usable GPU and driver)."""
    element = Gst.ElementFactory.make(factory_name, None) if element_available(factory_name) else None
    if element is None:
        return False
    try:
        return bool(element.set_state(Gst.State.READY) == Gst.StateChangeReturn.SUCCESS)
    finally:
        element.set_state(Gst.State.NULL)


def has_src_pad(factory_name: str) -> bool:
    """True when the element can output (a filter), False for a sink or an unknown element."""
    ensure_gst()
    factory = Gst.ElementFactory.find(factory_name)
    return factory is not None and any(t.direction == Gst.PadDirection.SRC for t in factory.get_static_pad_templates())


def is_decoder(factory_name: str) -> bool:
    ensure_gst()
    factory = Gst.ElementFactory.find(factory_name)
    return factory is not None and "Decoder" in (factory.get_klass() or "")


def uri_supported(uri: str) -> str | None:
    """None when GStreamer has a source for ``uri``'s protocol, else the reason."""
    ensure_gst()
    if not Gst.uri_is_valid(uri):
        return f"{uri!r} is not a URI (expected scheme://..., e.g. rtsp://host/path or file:///path)"
    protocol = Gst.uri_get_protocol(uri)
    if not Gst.Uri.protocol_is_supported(Gst.URIType.SRC, protocol):
        return f"no GStreamer source element handles {protocol}:// URIs in this build"
    return None
