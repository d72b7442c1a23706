"""Where a store's tensors come from, and reopening them in another process.

A store opened with ``mmap=True`` (the default) maps its partition's files read-only
and copy-on-write: every process on the machine that maps the same file shares the
same page-cache pages, opening costs no read of the tensors, and pages are read on
first touch (and can be dropped again under memory pressure, so a partition larger
than memory still trains). A write into a mapped tensor (``put_tensor`` with an index)
copies the touched pages privately; partition files are never modified.

:class:`PartitionSource` records which files a store mapped (device, inode, size and
modification time), so that a sampler worker or a same-machine peer can map exactly
the same files, and a file that was replaced since is refused instead of read.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Tuple, Union

from torch import Tensor

from pyg_dist._madvise import MADV_RANDOM, advise
from pyg_dist.format._schema import PartitionFormatError

#: ``random`` (default): feature rows are read by id, so reading ahead around a page
#: fault only evicts useful pages when memory is short; ``none``: the kernel's default
ADVICE_ENV = "PYG_DIST_MMAP_ADVICE"


def advise_rows(tensors: Iterable[Tensor]) -> None:
    """Tells the kernel that mapped attribute rows are read at random (no read-around
    on a page fault), unless ``PYG_DIST_MMAP_ADVICE=none``."""
    if os.environ.get(ADVICE_ENV, "random").strip().lower() != "random":
        return
    for t in tensors:
        advise(t.data_ptr(), t.numel() * t.element_size(), MADV_RANDOM, inward=False)


@dataclass(frozen=True)
class FileId:
    """One file, as the kernel identifies it (``os.stat``)."""
    path: str
    dev: int
    ino: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: Union[str, Path]) -> "FileId":
        st = os.stat(path)
        return cls(str(Path(path).absolute()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def same_as_now(self) -> bool:
        """Whether ``path`` is still this very file, unchanged."""
        try:
            return FileId.of(self.path) == self
        except OSError:
            return False


@dataclass(frozen=True)
class PartitionSource:
    """The files of partition ``part`` under ``root`` that a store mapped.

    Args:
        root (str): the partition folder (absolute).
        part (int): the partition.
        files (Tuple[FileId, ...]): identities of the mapped files, at open time.
    """
    root: str
    part: int
    files: Tuple[FileId, ...]

    def check_unchanged(self) -> None:
        """Raises :class:`PartitionFormatError` naming a file that was replaced,
        modified or removed since the store mapped it."""
        for f in self.files:
            if not f.same_as_now():
                raise PartitionFormatError(
                    f"{f.path} was replaced, modified or removed after this job mapped it; "
                    f"partition files must not change while a job uses them (write a new "
                    f"folder, or restart the job after rewriting this one)")
