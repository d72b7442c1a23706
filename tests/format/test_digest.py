"""The one digest helper: stable, sensitive to a flipped byte, names the file."""
from pathlib import Path

import pytest

from pyg_dist.format._digest import DigestMismatch, bytes_digest, check_file, file_digest


def test_file_digest_equals_bytes_digest_and_detects_a_flip(tmp_path: Path) -> None:
    data = bytes(range(256)) * 5000  # over one read block
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    recorded = file_digest(path)
    assert recorded == bytes_digest(data) and recorded.startswith("blake2b-128:")
    check_file(path, recorded)
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 1
    path.write_bytes(bytes(flipped))  # same size, one bit differs
    with pytest.raises(DigestMismatch, match="f.bin: contents differ"):
        check_file(path, recorded)
    with pytest.raises(DigestMismatch, match="not a blake2b-128 digest"):
        check_file(path, "md5:00")
