"""Every error class pyg_dist defines derives from :class:`pyg_dist.PygDistError` and
keeps its built-in base, so ``except PygDistError`` catches anything the library reports
and ``except ValueError`` (etc.) still works."""
from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Dict, List

import pytest

import pyg_dist
from pyg_dist import PygDistError


def library_modules() -> List[str]:
    """Every module of the pyg_dist package, by dotted name."""
    return sorted(info.name for info in pkgutil.walk_packages(pyg_dist.__path__, "pyg_dist."))


def exception_classes() -> Dict[str, type]:
    """``module.Class`` -> class, for every exception class defined in a pyg_dist module."""
    found = {}
    for name in library_modules():
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, BaseException) \
                    and value.__module__ == name:
                found[f"{name}.{attr}"] = value
    return found


def test_every_library_exception_derives_from_the_base():
    classes = exception_classes()
    assert len(classes) >= 20, sorted(classes)  # the walk found the library's errors
    stray = sorted(name for name, cls in classes.items() if not issubclass(cls, PygDistError))
    assert not stray, f"exception classes not derived from PygDistError: {stray}"


@pytest.mark.parametrize("name, builtin", [
    ("PartitionFormatError", ValueError), ("DisagreementError", ValueError),
    ("PeerFailedError", RuntimeError), ("RpcPeerError", RuntimeError)])
def test_public_errors_keep_their_builtin_bases(name, builtin):
    cls = getattr(pyg_dist, name)
    assert issubclass(cls, builtin) and issubclass(cls, PygDistError)
    with pytest.raises(builtin):
        raise cls("a message")


def test_errors_of_other_packages_keep_their_builtin_bases():
    from pyg_dist.checkpoint import CheckpointError
    from pyg_dist.datasets._errors import MissingDependencyError, MissingRawFilesError

    assert issubclass(CheckpointError, ValueError)
    assert issubclass(MissingDependencyError, ImportError)
    assert issubclass(MissingRawFilesError, FileNotFoundError)
    assert "PygDistError" in pyg_dist.__all__
