"""Reading and writing one chunk file: ``.npy`` (memory-mapped), text (``csv``), parquet.

Each reader takes one chunk, the unit of the chunked format that fits in memory, and
returns a NumPy array (``.npy`` files as read-only memory maps, so a row range costs
only its bytes). Every failure is a :class:`ChunkedFormatError` naming the file; no
message quotes a file's contents (the reasons NumPy and pyarrow give are dropped
where they could). Each reader checks first that its file is a regular file.
Parquet needs ``pyarrow`` (``pip install 'pyg_dist[parquet]'``).
"""
from __future__ import annotations

import math
import re
import warnings
from pathlib import Path
from typing import Any, Tuple

import numpy as np

from pyg_dist.chunked._errors import ChunkedFormatError
from pyg_dist.chunked._paths import regular_file_size
from pyg_dist.datasets._errors import MissingDependencyError

PARQUET_HINT = "pip install 'pyg_dist[parquet]' (or pip install pyarrow)"
#: the fewest bytes one edge takes in a text chunk: ``"0 0\n"``
MIN_TEXT_BYTES_PER_EDGE = 4


def pyarrow_modules() -> Tuple[Any, Any]:
    """``(pyarrow, pyarrow.parquet)``; raises :class:`MissingDependencyError` if absent."""
    try:
        import pyarrow
        import pyarrow.parquet as pq
    except ImportError:
        raise MissingDependencyError(f"parquet chunks need pyarrow, which is not installed: "
                                     f"{PARQUET_HINT}") from None
    return pyarrow, pq


def check_file(path: Path) -> int:
    """The size of chunk file ``path``; raises :class:`ChunkedFormatError` if it is
    missing or not a regular file (checked with ``os.stat``: nothing is opened)."""
    return regular_file_size(path)


def max_text_edges(path: Path) -> int:
    """The most edges text chunk ``path`` can hold, from its size (4 bytes per line at
    least, the last line's newline optional)."""
    return (check_file(path) + 1) // MIN_TEXT_BYTES_PER_EDGE


# ---- .npy -------------------------------------------------------------------------------
def npy_header(path: Path) -> Tuple[Tuple[int, ...], np.dtype]:
    """Shape and dtype of a ``.npy`` file, read from its header only; the file must be
    long enough for the array its header describes."""
    size = check_file(path)
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                np.lib.format.read_array_header_2_0
            shape, _, dtype = read(f)
            offset = f.tell()
    except (ValueError, OSError, SyntaxError, EOFError):  # their text quotes the bytes
        raise ChunkedFormatError(f"chunk file {path} is not a .npy file (no valid .npy "
                                 f"header)") from None
    if dtype.hasobject or dtype.names is not None:
        raise ChunkedFormatError(f"chunk file {path} holds {dtype} values; chunks must hold "
                                 f"plain numbers or booleans")
    need = offset + math.prod(shape) * dtype.itemsize
    if need > size:
        raise ChunkedFormatError(f"chunk file {path} is {size} bytes, but its .npy header "
                                 f"describes {dtype} values of shape {tuple(shape)} "
                                 f"({need} bytes): truncated or forged")
    return tuple(shape), dtype


def open_npy(path: Path) -> np.ndarray:
    """A ``.npy`` chunk as a read-only memory map (an empty array for zero rows)."""
    shape, dtype = npy_header(path)
    if int(np.prod(shape)) == 0:
        return np.empty(shape, dtype=dtype)
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise ChunkedFormatError(f"chunk file {path} cannot be read as .npy "
                                 f"({type(exc).__name__})") from None


# ---- text -------------------------------------------------------------------------------
def read_csv_ids(path: Path, delimiter: str) -> np.ndarray:
    """An edge chunk in text: one ``src<delimiter>dst`` pair of integers per line."""
    check_file(path)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "input contained no data"
            ids = np.loadtxt(path, dtype=np.int64, delimiter=delimiter, ndmin=2)
    except (ValueError, OSError) as exc:  # NumPy's text quotes the line: only its place
        where = re.search(r"at row \d+(, column \d+)?", str(exc))
        raise ChunkedFormatError(f"edge chunk {path} is not two columns of integers "
                                 f"separated by {delimiter!r}"
                                 + (f" ({where.group(0)})" if where else "")) from None
    if ids.size == 0:
        return np.empty((0, 2), dtype=np.int64)
    if ids.shape[1] != 2:
        raise ChunkedFormatError(f"edge chunk {path} has {ids.shape[1]} columns, expected 2 "
                                 f"(source and destination id)")
    return ids


def format_ids(ids: np.ndarray, delimiter: str = " ") -> bytes:
    """``[E, 2]`` non-negative integer ids as text (``"src<delimiter>dst\\n"`` per row),
    formatted with vectorised NumPy (one pass per digit position, no loop per edge)."""
    values = np.ascontiguousarray(ids, dtype=np.int64).reshape(-1)
    if values.size and int(values.min()) < 0:
        raise ValueError("edge ids must be non-negative")
    digits = np.ones(values.size, dtype=np.int64)
    for k in range(1, 19):
        digits += values >= 10 ** k
    ends = np.cumsum(digits + 1)  # each value is followed by its separator
    starts = ends - digits - 1
    text = np.empty(int(ends[-1]) if values.size else 0, dtype=np.uint8)
    rest = values.copy()
    for k in range(int(digits.max()) if values.size else 0):  # last digit first
        live = digits > k
        text[(starts + digits - 1 - k)[live]] = 48 + rest[live] % 10
        rest //= 10
    text[ends[0::2] - 1] = ord(delimiter)
    text[ends[1::2] - 1] = ord("\n")
    return text.tobytes()


def write_csv_ids(path: Path, ids: np.ndarray, delimiter: str = " ") -> None:
    """Writes ``[E, 2]`` integer ids as text, one pair per line."""
    path.write_bytes(format_ids(ids, delimiter))


# ---- parquet ----------------------------------------------------------------------------
def parquet_rows(path: Path) -> int:
    """Row count of a parquet file, from its footer."""
    _, pq = pyarrow_modules()
    check_file(path)
    try:
        return int(pq.ParquetFile(path).metadata.num_rows)
    except Exception as exc:  # pyarrow raises several types; re-raised naming the file
        raise ChunkedFormatError(f"chunk file {path} is not a parquet file "
                                 f"({type(exc).__name__})") from None


def read_parquet(path: Path) -> np.ndarray:
    """A parquet chunk as an array: one scalar column -> ``[N]``; one list column or
    several scalar columns -> ``[N, D]``."""
    pa, pq = pyarrow_modules()
    import pyarrow.compute as pc

    check_file(path)
    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types; re-raised naming the file
        raise ChunkedFormatError(f"chunk file {path} is not a parquet file "
                                 f"({type(exc).__name__})") from None
    if table.num_columns == 0:
        raise ChunkedFormatError(f"parquet chunk {path} has no columns")
    if any(table.column(i).null_count for i in range(table.num_columns)):
        raise ChunkedFormatError(f"parquet chunk {path} has missing (null) values")
    kind = table.column(0).type
    try:
        if table.num_columns == 1 and (pa.types.is_list(kind)
                                       or pa.types.is_fixed_size_list(kind)):
            column = table.column(0).combine_chunks()
            lengths = pc.list_value_length(column).to_numpy()
            if lengths.size and lengths.min() != lengths.max():
                raise ChunkedFormatError(f"parquet chunk {path} has rows of different "
                                         f"lengths ({lengths.min()} to {lengths.max()})")
            flat = column.flatten().to_numpy(zero_copy_only=False)
            return flat.reshape(table.num_rows, -1)
        columns = [table.column(i).to_numpy() for i in range(table.num_columns)]
    except (ValueError, TypeError, pa.ArrowException) as exc:  # their text may quote values
        raise ChunkedFormatError(f"parquet chunk {path} does not hold a numeric table "
                                 f"without nulls ({type(exc).__name__})") from None
    if any(c.dtype.hasobject for c in columns):
        raise ChunkedFormatError(f"parquet chunk {path} has non-numeric columns")
    return columns[0] if len(columns) == 1 else np.stack(columns, axis=1)


def write_parquet(path: Path, array: np.ndarray, names: Tuple[str, ...] = ()) -> None:
    """Writes a 1-D array as one column, a 2-D one as one column of fixed-size lists,
    or (with ``names``) one column per array column."""
    pa, pq = pyarrow_modules()
    if array.ndim > 2:
        raise ValueError(f"parquet chunks hold 1-D or 2-D arrays, got shape {array.shape}")
    if names:
        table = pa.table({n: array[:, i] for i, n in enumerate(names)})
    elif array.ndim == 1:
        table = pa.table({"0": array})
    else:
        flat = pa.array(np.ascontiguousarray(array).reshape(-1))
        table = pa.table({"0": pa.FixedSizeListArray.from_arrays(flat, array.shape[1])})
    pq.write_table(table, path)


def read_parquet_ids(path: Path) -> np.ndarray:
    """An edge chunk in parquet: two integer columns (source, destination)."""
    ids = read_parquet(path)
    if ids.ndim != 2 or ids.shape[1] != 2:
        raise ChunkedFormatError(f"edge chunk {path} has {1 if ids.ndim == 1 else ids.shape[1]}"
                                 f" column(s), expected 2 (source and destination id)")
    return ids


# ---- writing ----------------------------------------------------------------------------
def write_npy(path: Path, array: np.ndarray) -> None:
    """``np.save`` without pickles (the folder around it is written atomically)."""
    with open(path, "wb") as f:
        np.save(f, np.ascontiguousarray(array), allow_pickle=False)
