"""Where the Mask comes from: which rule removed each (query i, key t) cell, and custom masks read from files.

The additive Mask of Softmax(Q K^T / sqrt(d_k) + Mask) is the combination of up to four rules; a cell may attend
only if every rule allows it:

- causal:  key t after query i (t > i) is removed (V_<=i);
- window:  key t older than the n_c most recent (t <= i - n_c) is removed (V_[i-n_c+1, i]); a window implies causal;
- padding: key t is a pad token added to make a batch rectangular;
- custom:  a --mask-file grid (True / 1 = may attend) says no.

NumPy only: no typer, rich or tokenizers here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from qkv_cli.errors import QkvError
from qkv_cli.masks import allowed_to_additive

RULES = ("causal", "window", "padding", "custom")
RULE_HELP = {
    "causal": "key after the query (t > i)",
    "window": "key older than the n_c most recent (t <= i - n_c)",
    "padding": "key is a pad token",
    "custom": "--mask-file says no",
}
MAX_MASK_BYTES = 64 * 2**20
MAX_CELLS = 2**22  # `qkv mask` shows every cell: beyond 2048 x 2048 the grids and their JSON take minutes and GBs


def check_cells(m: int, n: int) -> None:
    """Refuse a grid too large to show before any of it is allocated."""
    if m * n > MAX_CELLS:
        raise QkvError(f"the mask would have m x n = {m} x {n} = {m * n} cells: at most {MAX_CELLS} are shown; "
                       "use a shorter text or a smaller --pad-to")  # fmt: skip


def rule_grids(
    m: int, n: int | None = None, causal: bool = False, window: int | None = None, padding=None, custom=None
) -> dict:  # -> {rule: [m, n] bool, True where that rule removes the cell}
    """One boolean grid per active rule: True where the rule removes (query i, key t)."""
    n = m if n is None else n
    i = np.arange(m)[:, None]
    t = np.arange(n)[None, :]
    grids = {}
    if (causal or window is not None) and n != m:
        raise QkvError("a causal mask or a window needs self-attention: with --context the keys are another text")
    if window is not None:
        if window < 1:
            raise QkvError(f"--window ({window}) must be at least 1: query i sees keys i-n_c+1..i")
        grids["causal"] = t > i
        grids["window"] = t <= i - min(window, m)  # a window of m or more removes nothing (no int64 overflow)
    elif causal:
        grids["causal"] = t > i
    if padding is not None:
        pad = np.asarray(padding, dtype=bool)
        if pad.shape != (n,):
            raise QkvError(f"padding must mark each of the n={n} keys, got shape {pad.shape}")
        grids["padding"] = np.broadcast_to(pad[None, :], (m, n)).copy()
    if custom is not None:
        check_shape(custom, m, n)
        grids["custom"] = ~np.asarray(custom, dtype=bool)
    return grids


def allowed_grid(grids: dict, m: int, n: int):  # -> [m, n] bool: True = may attend (no rule removes it)
    allowed = np.ones((m, n), dtype=bool)
    for removed in grids.values():
        allowed &= ~removed
    return allowed


def removed_by(grids: dict, m: int, n: int) -> list[list[list[str]]]:
    """For each cell, the rules that remove it, in the order of RULES (an empty list = may attend)."""
    out = [[[] for _ in range(n)] for _ in range(m)]
    for rule in RULES:
        if rule in grids:
            for i, t in zip(*np.nonzero(grids[rule]), strict=True):
                out[i][t].append(rule)
    return out


def combine(mask, allowed, dtype=np.float64):  # [m, n] additive or None, [m, n] bool -> [m, n] additive
    """Add a boolean rule (True = may attend) to an additive mask (None = nothing masked yet)."""
    extra = allowed_to_additive(np.asarray(allowed, dtype=bool), dtype)
    return extra if mask is None else mask + extra


def check_shape(allowed, m: int, n: int, source: str = "the custom mask") -> None:
    shape = np.shape(allowed)
    if shape != (m, n):
        what = f"m={m} queries x n={n} keys" if m != n else f"m={m} x m={m} (the text has {m} tokens)"
        raise QkvError(f"{source} has shape {' x '.join(map(str, shape))} but this run needs {what}")


def load_mask_file(path: str | Path):  # -> [rows, cols] bool, True = may attend
    """A .npy boolean (or 0/1) array, or a text grid of 0/1 (one row per line; spaces and commas ignored)."""
    p = Path(path)
    what = f"--mask-file {str(path)!r}"
    from qkv_cli.inputs import is_file_name

    if not is_file_name(path):
        raise QkvError(f"{what} is not a file name: give a .npy file or a text grid of 0/1")
    if p.is_dir():
        raise QkvError(f"{what} is a directory: give a .npy file or a text grid of 0/1")
    try:
        if p.stat().st_size > MAX_MASK_BYTES:
            raise QkvError(f"{what} is larger than {MAX_MASK_BYTES} bytes: that is not a mask for a text")
        data = p.read_bytes()
    except FileNotFoundError:
        raise QkvError(f"{what} does not exist") from None
    except OSError as exc:
        raise QkvError(f"{what} cannot be read: {exc.strerror or exc}") from None
    grid = _from_npy(data, what) if p.suffix.lower() == ".npy" else _from_text(data, what)
    if grid.ndim != 2 or 0 in grid.shape:
        raise QkvError(f"{what} must be a 2-D grid (queries x keys), got shape {grid.shape}")
    return grid


def _from_npy(data: bytes, what: str):
    import io

    try:
        arr = np.load(io.BytesIO(data), allow_pickle=False)
    except ValueError as exc:
        if "pickle" in str(exc).lower():
            raise QkvError(f"{what} holds Python objects (pickled): save a boolean array") from None
        raise QkvError(f"{what} is not a valid .npy file: {exc}") from None
    except (OSError, EOFError) as exc:
        raise QkvError(f"{what} is not a valid .npy file: {exc}") from None
    if not isinstance(arr, np.ndarray):
        raise QkvError(f"{what} is not a single array (.npz archives are not masks): save one boolean array")
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
