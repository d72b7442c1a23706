"""Scratch arrays on disk: memory maps the operating system pages in and out."""
from __future__ import annotations

from pathlib import Path
from typing import Tuple, Union

import numpy as np

from pyg_dist.partition._common import plain

__all__ = ["Scratch", "plain"]


class Scratch:
    """Creates memory-mapped arrays in one folder (removed with the output's temporary
    folder when the run ends or fails).

    Args:
        folder (Path): where the files go (created if missing).
    """

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._count = 0

    def array(self, name: str, dtype: Union[np.dtype, str], shape: Tuple[int, ...]
              ) -> np.ndarray:
        """A new zero-filled writable array backed by a file (an in-memory one when empty,
        since a file of zero bytes cannot be mapped)."""
        if int(np.prod(shape)) == 0:
            return np.zeros(shape, dtype=dtype)
        self._count += 1
        path = self.folder / f"{self._count}-{name}.bin"
        return np.memmap(path, dtype=dtype, mode="w+", shape=tuple(shape))

    @staticmethod
    def drop(array: np.ndarray) -> None:
        """Deletes the file behind ``array`` (a memory map or a view of one) to give its
        disk space back once the last mapping goes; in-memory arrays are left alone."""
        while array is not None and not isinstance(array, np.memmap):
            array = getattr(array, "base", None)
        if array is not None and array.filename is not None:
            Path(array.filename).unlink(missing_ok=True)

    def path(self, name: str) -> Path:
        """A fresh file path in the folder."""
        self._count += 1
        return self.folder / f"{self._count}-{name}"
