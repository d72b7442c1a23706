"""Reading JSON documents: the one place every JSON file pyg_dist reads is parsed.

``META.json``, ``MANIFEST.json``, chunked ``metadata.json``, checkpoint ``info.json``, an
export's ``manifest.json``, a torch_geometric partition's ``META.json`` and the records
of interrupted writers are all untrusted input: whatever they hold (a pickle, text that
is not JSON, brackets nested a hundred thousand deep) the reader gets one line naming
the file, in its own format's exception class. Writing is
:func:`pyg_dist.format._files.write_json` (atomic).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Union

PathLike = Union[str, os.PathLike]


def parse_json(data: Union[bytes, str], where: str, error: Callable[[str], Exception]
               ) -> Any:
    """Parses a JSON document read from ``where``.

    Args:
        data (bytes or str): the document.
        where (str): what it was read from (a file's path), for the message.
        error (Callable[[str], Exception]): the caller's exception class.

    Raises:
        error: one line naming ``where`` when the document is not UTF-8 (a binary or
            pickled file), not JSON, or nested too deeply to parse.
    """
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError:  # its text quotes the offending bytes
        raise error(f"{where} is not UTF-8 JSON text (a binary or pickled file?)") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:  # its msg is fixed text, never the file's
        raise error(f"{where} is not valid JSON: {exc.msg} at line {exc.lineno} column "
                    f"{exc.colno}") from None
    except RecursionError:
        raise error(f"{where} is not a JSON document pyg_dist reads: it is nested too "
                    f"deeply to parse") from None


def read_json(path: PathLike, error: Callable[[str], Exception]) -> Any:
    """Reads and parses the JSON file ``path`` (see :func:`parse_json`).

    Raises:
        error: one line naming ``path`` when it cannot be read or parsed.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise error(f"{path} cannot be read: {exc.strerror or exc}") from None
    return parse_json(data, str(path), error)
