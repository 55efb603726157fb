"""Writing a finished matplotlib figure as SVG and PNG: byte-stable and atomic."""

from __future__ import annotations

import io
from pathlib import Path

import presdep.runtime.mplconfig  # noqa: F401 - before matplotlib: no font cache in the user's home

# isort: split
import matplotlib

from presdep.contracts.schemas import write_bytes_atomic


def save_svg_png(fig, out_svg: str | Path, out_png: str | Path, salt: str) -> None:
    """The figure to ``out_svg`` and ``out_png`` (150 dpi). A fixed SVG hash salt and no date
    make equal figures equal bytes; each file is written atomically."""
    with matplotlib.rc_context({"svg.hashsalt": salt}):
        for path, fmt, extra in ((out_svg, "svg", {"metadata": {"Date": None}}), (out_png, "png", {"dpi": 150})):
            buf = io.BytesIO()
            fig.savefig(buf, format=fmt, **extra)
            write_bytes_atomic(Path(path), buf.getvalue())
