"""NPZ / JSON / CSV views of a Result. Files are written to a temporary file and renamed: never half-written."""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from qkv_cli.errors import QkvError

SCHEMA = ("tokens", "H", "Wq", "Wk", "Wv", "Q", "K", "V", "scores", "mask", "weights", "heads", "Wo", "output")
SHOW_NAMES = {
    "q": "Q",
    "k": "K",
    "v": "V",
    "scores": "scores",
    "mask": "mask",
    "weights": "weights",
    "output": "output",
    "heads": "heads",
    "h": "H",
}


def check_output_path(path: str | Path, suffixes: tuple[str, ...] | None = None) -> Path:
    """Fail before any work if the file could not be written: bad extension, missing folder, a directory."""
    p = Path(path)
    from qkv_cli.inputs import is_file_name

    if not is_file_name(path):
        raise QkvError(f"cannot write {str(path)!r}: it is not a file name")
    if suffixes is not None and p.suffix.lower() not in suffixes:
        raise QkvError(f"cannot write {str(p)!r}: the extension must be one of {', '.join(suffixes)}")
    if p.is_dir():
        raise QkvError(f"cannot write {str(p)!r}: it is a directory; give a file name")
    folder = p.parent if str(p.parent) else Path(".")
    if not folder.is_dir():
        raise QkvError(f"cannot write {str(p)!r}: folder {str(folder)!r} does not exist")
    if not os.access(folder, os.W_OK):
        raise QkvError(f"cannot write {str(p)!r}: folder {str(folder)!r} is not writable")
    return p


@contextmanager
def atomic_write(path: str | Path, mode: str = "wb"):
    """Yield a temporary file beside `path`; rename it over `path` only if the block finishes."""
    p = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent if str(p.parent) else ".")
    except OSError as exc:
        raise QkvError(f"cannot write {str(p)!r}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, mode) as handle:
            yield handle
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual permissions
        os.replace(tmp, p)
    except OSError as exc:
        _remove(tmp)
        raise QkvError(f"cannot write {str(p)!r}: {exc.strerror or exc}") from None
    except BaseException:
        _remove(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def arrays(result) -> dict:
    """The export schema: the matrices plus scalars d, tau, scale, seed and the kernel name."""
    s = result.settings
    out = {"tokens": np.array(list(result.tokens.strings), dtype=str)}
    for name in SCHEMA[1:]:
        out[name] = getattr(result, name)
    out.update(
        d=np.int64(s.d),
        tau=np.int64(s.tau),
        scale=np.float64(result.scale),
        seed=np.int64(s.seed),
        kernel=np.array(s.kernel),
    )
    out.update(result.extra.get("arrays", {}))
    return out


def save_npz(result, path: str | Path) -> Path:
    p = check_output_path(path)
    with atomic_write(p) as handle:
        np.savez(handle, **arrays(result))
    return p


def settings_dict(result) -> dict:
    s = result.settings
    return {
        "d": s.d,
        "tau": s.tau,
        "d_k": s.d_k,
        "seed": s.seed,
        "kernel": s.kernel,
        "causal": s.causal_mask,
        "window": s.window,
        "scale": result.scale,
        "scale_option": s.scale,
        "positions": s.positions,
        "projection": s.projection,
        "dtype": s.dtype,
        "tokenizer": s.tokenizer,
        "kv_heads": getattr(s, "G", s.tau),
        "ablate": getattr(s, "ablate", None),
        "ablate_with": getattr(s, "ablate_with", None),
    }


def jsonable(x):
    """Arrays to nested lists; -inf (masked) becomes null, since JSON has no infinity."""
    arr = np.asarray(x, dtype=np.float64)
    return np.where(np.isfinite(arr), arr, np.nan).tolist() if arr.size else arr.tolist()


def _nan_to_null(obj):
    if isinstance(obj, float) and obj != obj:
        return None
    if isinstance(obj, list):
        return [_nan_to_null(v) for v in obj]
    return obj


def to_json(result, show, heads) -> str:
    doc = {
        "tokens": list(result.tokens.strings),
        "labels": result.labels,
        "settings": settings_dict(result),
        "heads_shown": list(heads),
        "fully_masked_queries": [int(i) for i in result.empty_rows.nonzero()[0]],  # their weights are all 0
        "matrices": {},
    }
    if result.key_labels != result.labels:
        doc["context_tokens"] = result.key_labels
    doc.update(result.extra.get("json", {}))  # e.g. "ablation": what --ablate changed
    for name in show:
        key = SHOW_NAMES[name]
        arr = getattr(result, key)
        if key in ("Q", "scores", "weights", "heads"):
            arr = arr[list(heads)]
        doc["matrices"][key] = _nan_to_null(jsonable(arr))
    return json.dumps(doc, allow_nan=False)


def to_csv(result, show, heads) -> str:
    """Long form: matrix, head, query, key, query_token, key_token, value (key = feature index for Q, K, V ...)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["matrix", "head", "query", "key", "query_token", "key_token", "value"])
    labels, key_labels = result.labels, result.key_labels
    for name in show:
        key = SHOW_NAMES[name]
        arr = getattr(result, key)
        grid = key in ("scores", "weights", "mask")
        row_names = key_labels if key in ("K", "V") else labels
        if key in ("K", "V") and arr.shape[0] != result.Q.shape[0]:  # grouped-query: the K/V heads shown heads read
            group = result.Q.shape[0] // arr.shape[0]
            blocks = [(g, arr[g]) for g in sorted({j // group for j in heads})]
        else:
            blocks = [(j, arr[j]) for j in heads] if arr.ndim == 3 else [("", arr)]
        for head, matrix in blocks:
            for i in range(matrix.shape[0]):
                for c in range(matrix.shape[1]):
                    v = matrix[i, c]
                    writer.writerow(
                        [
                            key,
                            head,
                            i,
                            c,
                            row_names[i],
                            key_labels[c] if grid else "",
                            "-inf" if np.isneginf(v) else repr(float(v)),
                        ]
                    )
    return buf.getvalue()
