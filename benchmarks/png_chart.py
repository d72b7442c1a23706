"""A stacked horizontal bar chart written as a PNG with numpy and zlib only (no
matplotlib or Pillow needed): rows of labelled bars, each a stack of coloured
segments, a legend and a millisecond axis. Text uses a built-in 3x5 pixel font
(upper-case letters, digits and a few signs), scaled up.
"""
from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import numpy as np

# 3x5 glyphs, one string of 15 bits per character (rows top to bottom)
_FONT = {
    "A": "010101111101101", "B": "110101110101110", "C": "011100100100011",
    "D": "110101101101110", "E": "111100110100111", "F": "111100110100100",
    "G": "011100101101011", "H": "101101111101101", "I": "111010010010111",
    "J": "001001001101010", "K": "101101110101101", "L": "100100100100111",
    "M": "101111111101101", "N": "110101101101101", "O": "010101101101010",
    "P": "110101110100100", "Q": "010101101110011", "R": "110101110101101",
    "S": "011100010001110", "T": "111010010010010", "U": "101101101101111",
    "V": "101101101101010", "W": "101101111111101", "X": "101101010101101",
    "Y": "101101010010010", "Z": "111001010100111", "0": "111101101101111",
    "1": "010110010010111", "2": "110001010100111", "3": "110001010001110",
    "4": "101101111001001", "5": "111100110001110", "6": "011100111101111",
    "7": "111001010010010", "8": "111101111101111", "9": "111101111001110",
    " ": "000000000000000", ".": "000000000000010", ",": "000000000010100",
    "%": "101001010100101", "-": "000000111000000", "+": "000010111010000",
    "/": "001001010100100", "=": "000111000111000", "(": "010100100100010",
    ")": "010001001001010", ":": "000010000010000", "_": "000000000000111",
    "x": "000101010101000", "<": "001010100010001", ">": "100010001010100",
}
PALETTE = [(66, 133, 244), (219, 68, 55), (244, 180, 0), (15, 157, 88), (171, 71, 188),
           (0, 172, 193), (255, 112, 67), (158, 157, 36), (92, 107, 192), (120, 120, 120),
           (60, 60, 60), (190, 190, 190)]


def _text(img: np.ndarray, x: int, y: int, text: str, scale: int = 2,
          color: Tuple[int, int, int] = (0, 0, 0)) -> None:
    for ch in text:
        glyph = _FONT.get(ch if ch in _FONT else ch.upper(), _FONT[" "])
        for i, bit in enumerate(glyph):
            if bit == "1":
                r, c = divmod(i, 3)
                y0, x0 = y + r * scale, x + c * scale
                img[y0:y0 + scale, x0:x0 + scale] = color
        x += 4 * scale


def _write_png(path: Path, img: np.ndarray) -> None:
    h, w, _ = img.shape
    raw = b"".join(b"\x00" + img[r].astype(np.uint8).tobytes() for r in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))
    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(png)
    tmp.replace(path)


def stacked_bars(path: Path, title: str, bars: Sequence[Tuple[str, Dict[str, float]]],
                 segments: List[str]) -> None:
    """Writes the chart.

    Args:
        path (Path): the PNG to write.
        title (str): the line on top.
        bars: ``(label, {segment: milliseconds})`` per bar, top to bottom.
        segments: every segment name, in stacking order (the legend's order).
    """
    left, width, bar_h, gap, top = 330, 800, 22, 10, 40
    legend_rows = (len(segments) + 3) // 4
    height = top + len(bars) * (bar_h + gap) + 40 + legend_rows * 22 + 10
    img = np.full((height, left + width + 40, 3), 255, dtype=np.uint8)
    _text(img, 10, 10, title)
    longest = max((sum(v.values()) for _, v in bars), default=1.0) or 1.0
    scale = width / longest
    colors = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(segments)}
    for row, (label, values) in enumerate(bars):
        y = top + row * (bar_h + gap)
        _text(img, 10, y + 6, label[:40])
        x = float(left)
        for name in segments:
            w = values.get(name, 0.0) * scale
            img[y:y + bar_h, int(round(x)):int(round(x + w))] = colors[name]
            x += w
        _text(img, int(x) + 4, y + 6, f"{sum(values.values()):.0f}")
    axis_y = top + len(bars) * (bar_h + gap)
    img[axis_y, left:left + width] = (0, 0, 0)
    for k in range(6):
        x = left + int(width * k / 5)
        img[axis_y:axis_y + 5, x] = (0, 0, 0)
        _text(img, x - 8, axis_y + 8, f"{longest * k / 5:.0f}")
    _text(img, left + width - 20, axis_y + 20, "MS")
    for i, name in enumerate(segments):
        r, c = divmod(i, 4)
        x, y = 10 + c * 280, axis_y + 40 + r * 22
        img[y:y + 12, x:x + 12] = colors[name]
        _text(img, x + 18, y + 1, name)
    _write_png(path, img)
