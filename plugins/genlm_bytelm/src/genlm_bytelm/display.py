"""Text and HTML renderings of bytes and tables, as genlm-bytes 0.2.0 prints them."""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["escape", "format_byte", "format_table"]


def escape(x: Any) -> str:
    """A byte (int), bytes or str as printable text; spaces shown as ``␣``."""
    if isinstance(x, int):  # a byte
        x = bytes([x])
    y = repr(x)[2:-1] if isinstance(x, bytes) else repr(x)[1:-1]
    return y.replace(" ", "␣")


def format_byte(byte_val: Any) -> str:
    """``b'A'`` for a byte 0-255, ``str(value)`` otherwise (EOT 256, EOS 257, anything)."""
    try:
        return repr(bytes([byte_val])) if 0 <= byte_val <= 255 else str(byte_val)
    except Exception:  # noqa: BLE001 - a display helper never raises
        return str(byte_val)


def format_table(rows: Iterable[Sequence[Any]], headings: Sequence[Any] | None = None) -> str:
    """An HTML table of ``rows``; cells with an HTML/SVG representation are embedded."""
    head = ""
    if headings:
        head = '<tr style="font-weight: bold;">' + "".join(f"<td>{x}</td>" for x in headings)
        head += "</tr>"
    body = "".join("<tr>" + "".join(f"<td>{_cell(x)}</td>" for x in row) + " </tr>" for row in rows)
    return f"<table>{head}{body}</table>"


def _cell(x: Any) -> str:
    data = getattr(x, "data", None)  # IPython.display.HTML / SVG objects
    if data is not None and type(x).__name__ in ("HTML", "SVG"):
        return str(data)
    for method in ("_repr_html_", "_repr_svg_", "_repr_image_svg_xml"):
        if hasattr(x, method):
            return getattr(x, method)()
    return f"<pre>{html.escape(str(x))}</pre>"
