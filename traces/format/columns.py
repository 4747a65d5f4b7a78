"""Reading a trace table's string columns without turning every row into a Python string.

A trace's op and tensor tables hold kinds, phases and names as Arrow strings. Asking which rows
have one of a few values (the ops a PIM unit can run, the tensors that are operands) by
``to_pylist()`` costs a Python string per row; :func:`string_in` compares the column's bytes in
numpy instead, from its offsets and data buffers (zero-copy).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pyarrow as pa

_OFFSETS = {pa.string(): np.int32, pa.large_string(): np.int64}


def string_in(column, values: Iterable[str]) -> np.ndarray:
    """Whether each row of ``column`` (an Arrow string array or chunked array, or a sequence of
    str) equals one of ``values``: a bool array, one per row (null rows: False)."""
    values = frozenset(values)
    if not isinstance(column, (pa.Array, pa.ChunkedArray)):
        return np.fromiter(map(values.__contains__, column), bool, len(column))
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    parts = [_chunk_in(c, values) for c in chunks]
    if not parts:
        return np.zeros(0, bool)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _chunk_in(a: pa.Array, values: frozenset) -> np.ndarray:
    n = len(a)
    odt = _OFFSETS.get(a.type)
    if odt is None or a.null_count:            # another type, or nulls: row by row
        return np.fromiter((v in values for v in a.to_pylist()), bool, n)
    _, off_buf, data_buf = a.buffers()
    off = np.frombuffer(off_buf, odt, n + 1, offset=a.offset * np.dtype(odt).itemsize).astype(np.int64)
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None and data_buf.size else np.zeros(0, np.uint8)
    start, length = off[:-1], np.diff(off)
    hit = np.zeros(n, bool)
    for v in values:
        b = np.frombuffer(v.encode("utf-8"), np.uint8)
        idx = np.flatnonzero(length == len(b))
        if len(b) and len(idx):
            idx = idx[(data[start[idx, None] + np.arange(len(b))] == b).all(axis=1)]
        hit[idx] = True
    return hit
