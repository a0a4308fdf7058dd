"""Custom masks from files (--mask-file): a .npy boolean (or 0/1) array, or a text grid of 0/1, one row per query.

True / 1 = may attend. The grid joins the other mask rules as the `custom` rule (qkv_cli.core.masks).
Nothing is unpickled, and the declared shape of a .npy file is checked against its size before anything is read.
"""

from __future__ import annotations

import numpy as np

from qkv_cli.errors import QkvError
from qkv_cli.text.inputs import read_bytes

MAX_MASK_BYTES = 64 * 2**20


def load_mask_file(path):  # -> [rows, cols] bool, True = may attend
    """A .npy boolean (or 0/1) array, or a text grid of 0/1 (one row per line; spaces and commas ignored)."""
    what = f"--mask-file {str(path)!r}"
    data = read_bytes(path, what, MAX_MASK_BYTES, hint="give a .npy file or a text grid of 0/1")
    grid = _from_npy(data, what) if str(path).lower().endswith(".npy") else _from_text(data, what)
    if grid.ndim != 2 or 0 in grid.shape:
        raise QkvError(f"{what} must be a 2-D grid (queries x keys), got shape {grid.shape}")
    return grid


def _from_npy(data: bytes, what: str):
    import io

    from numpy.lib import format as npy

    stream = io.BytesIO(data)
    try:  # the header first: a 16-byte file may declare (10^6, 10^6)
        major, _ = npy.read_magic(stream)
        read_header = npy.read_array_header_1_0 if major == 1 else npy.read_array_header_2_0
        shape, _, dtype = read_header(stream)
    except (ValueError, OSError, EOFError, SyntaxError) as exc:
        raise QkvError(f"{what} is not a valid .npy file: {exc}") from None
    if dtype.hasobject:
        raise QkvError(f"{what} holds Python objects (pickled): save a boolean array")
    declared = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if declared > len(data) - stream.tell():
        raise QkvError(f"{what} declares shape {shape} ({declared} bytes) but holds {len(data) - stream.tell()}")
    try:
        arr = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise QkvError(f"{what} is not a valid .npy file: {exc}") from None
    if arr.dtype == bool:
        return arr
    if arr.dtype.kind in "iuf" and arr.size and np.isin(arr, (0, 1)).all():
        return arr.astype(bool)
    raise QkvError(
        f"{what} has dtype {arr.dtype} with values other than 0 and 1: save a boolean array (True = may attend)"
    )


def _from_text(data: bytes, what: str):
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise QkvError(f"{what} is neither a .npy file nor UTF-8 text: give a .npy or a 0/1 text grid") from None
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        cells = line.split("#", 1)[0].replace(",", " ").replace("\t", " ").replace(" ", "")
        if not cells:
            continue
        bad = [c for c in cells if c not in "01"]
        if bad:
            raise QkvError(f"{what} line {number} has {bad[0]!r}: a text mask holds only 0 and 1 (1 = may attend)")
        rows.append([c == "1" for c in cells])
    if not rows:
        raise QkvError(f"{what} is empty: give one row of 0/1 per query")
    widths = {len(r) for r in rows}
    if len(widths) > 1:
        raise QkvError(
            f"{what} has rows of different lengths ({', '.join(map(str, sorted(widths)))}): "
            "every row needs one 0/1 per key"
        )
    return np.array(rows, dtype=bool)
