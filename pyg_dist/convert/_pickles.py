"""Loading the ``.pt`` files of a ``torch_geometric.distributed`` partition folder.

Most of PyG's files load with ``torch.load(weights_only=True)``, which cannot run
code. Its ``edge_feats.pt`` files hold a ``collections.defaultdict``, which
``weights_only`` refuses: unpickling them can run whatever code whoever wrote the
folder put there. :class:`PickleLoader` therefore loads every file with
``weights_only=True`` first and falls back to ``weights_only=False`` only for files
refused that way, and only when the user said they trust the folder
(``--trust-pickles``); it reports the first such load. Our own partition stores never
load PyG's files.
"""
from __future__ import annotations

import pickle
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, List, Optional

import torch

from pyg_dist.errors import PygDistError

_REFUSED = "Weights only load failed"  # torch's message when weights_only refuses a pickle


class PygFormatError(ValueError, PygDistError):
    """A PyG partition folder (or its extras) that is incomplete, damaged or inconsistent.
    The message is one line naming the file."""


class UntrustedPickleError(PygFormatError):
    """A file needs full unpickling (``weights_only=False``) and the user did not trust it."""


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


@dataclass
class PickleLoader:
    """Loads ``.pt`` files safely, or as trusted pickles when allowed.

    Args:
        trust (bool): load files that ``weights_only=True`` refuses with
            ``weights_only=False`` (can run code stored in them).
        notify (Callable[[str], None], optional): called with one line the first time a
            file is loaded that way (default: a ``UserWarning``).
        flag (str): how the user grants trust, for messages (``--trust-pickles``).
        unsafe_files (List[Path]): files loaded with ``weights_only=False`` so far.
    """
    trust: bool = False
    notify: Optional[Callable[[str], None]] = None
    flag: str = "trust_pickles=True"
    unsafe_files: List[Path] = field(default_factory=list)

    def load(self, path: Path, what: str) -> Any:
        """Loads ``path`` (``what`` names it in errors); raises :class:`PygFormatError`."""
        path = Path(path)
        if not path.is_file():
            raise PygFormatError(f"{what} {path} is missing")
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as exc:
            if _REFUSED not in str(exc):
                raise PygFormatError(f"{what} {path} is damaged: {_one_line(exc)}") from exc
        except Exception as exc:  # re-raised with the file named
            raise PygFormatError(f"{what} {path} is damaged: {_one_line(exc)}") from exc
        return self._load_unsafe(path, what)

    def _load_unsafe(self, path: Path, what: str) -> Any:
        if not self.trust:
            raise UntrustedPickleError(
                f"{what} {path} holds Python objects that torch.load(weights_only=True) "
                f"refuses (PyG pickles a collections.defaultdict there); unpickling it can "
                f"run arbitrary code stored in the file: pass {self.flag} only if you "
                f"trust where this folder came from")
        if not self.unsafe_files:
            self._say(f"{self.flag}: loading {path} with torch.load(weights_only=False), "
                      f"which can run code stored in the file; further files that "
                      f"weights_only=True refuses are loaded the same way")
        self.unsafe_files.append(path)
        try:
            return torch.load(path, map_location="cpu", weights_only=False)
        except Exception as exc:  # re-raised with the file named
            raise PygFormatError(f"{what} {path} is damaged: {_one_line(exc)}") from exc

    def _say(self, line: str) -> None:
        if self.notify is not None:
            self.notify(line)
        else:
            warnings.warn(line, stacklevel=4)
