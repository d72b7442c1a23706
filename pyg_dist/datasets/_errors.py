"""Errors of the dataset readers: each one reads as a single line a user can act on."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, List, Sequence, Union

from pyg_dist.errors import PygDistError


class DatasetError(ValueError, PygDistError):
    """A dataset name, argument or file that cannot be used (one-line message)."""


class MissingDependencyError(ImportError, PygDistError):
    """An optional package a dataset needs is not installed (names the pip command)."""


class MissingRawFilesError(FileNotFoundError, PygDistError):
    """Raw files of a dataset are missing and downloading was not asked for.

    Args:
        dataset (str): the dataset name as the user gave it.
        folder (str or Path): where the files are expected.
        files (Sequence[str]): the missing files, relative to ``folder``.
        hint (str): what to do about it (appended to the message).
    """

    def __init__(self, dataset: str, folder: Union[str, Path], files: Sequence[str],
                 hint: str = "or pass --download to fetch them") -> None:
        self.dataset, self.folder, self.files = dataset, Path(folder), list(files)
        shown = ", ".join(self.files[:8]) + (f" (+{len(self.files) - 8} more)"
                                             if len(self.files) > 8 else "")
        super().__init__(f"{dataset}: raw file(s) missing in {self.folder}: {shown} "
                         f"(put the dataset's raw files there, {hint})")

    def __str__(self) -> str:
        return str(self.args[0])


def missing_files(folder: Union[str, Path], names: Iterable[str]) -> List[str]:
    """The entries of ``names`` (paths relative to ``folder``) that are not files."""
    folder = Path(folder)
    return [name for name in names if not (folder / name).is_file()]
