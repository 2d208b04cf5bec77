"""One table of GObject properties shared by every element (R7): declared once, documented for gst-inspect."""
from __future__ import annotations

import gi

gi.require_version("Gst", "1.0")
from gi.repository import GObject, Gst

READY_ONLY = GObject.ParamFlags.READWRITE | Gst.PARAM_MUTABLE_READY
PLAYING_OK = GObject.ParamFlags.READWRITE | Gst.PARAM_MUTABLE_PLAYING


def string(nick: str, blurb: str, default: str = "", mutable_playing: bool = False) -> GObject.Property:
    return GObject.Property(type=str, default=default, nick=nick, blurb=blurb,
                            flags=PLAYING_OK if mutable_playing else READY_ONLY)


def number(nick: str, blurb: str, default: float, minimum: float, maximum: float) -> GObject.Property:
    return GObject.Property(type=float, default=default, minimum=minimum, maximum=maximum, nick=nick, blurb=blurb,
                            flags=READY_ONLY)


def integer(nick: str, blurb: str, default: int, minimum: int, maximum: int) -> GObject.Property:
    return GObject.Property(type=int, default=default, minimum=minimum, maximum=maximum, nick=nick, blurb=blurb,
                            flags=READY_ONLY)


def boolean(nick: str, blurb: str, default: bool) -> GObject.Property:
    return GObject.Property(type=bool, default=default, nick=nick, blurb=blurb, flags=READY_ONLY)



def choice(nick: str, blurb: str, choices: tuple[str, ...], default: str) -> GObject.Property:
    """A string restricted to ``choices`` (checked in do_start); the choices are listed in the blurb."""
    return string(nick, f"{blurb} ({' | '.join(choices)})", default)
