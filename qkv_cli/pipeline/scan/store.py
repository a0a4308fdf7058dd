"""A scan's folder (--out DIR): `scan.json` (what the scan measures), one Parquet shard per block of texts, and
`summary.json` at the end.

Shard k holds the rows of texts k*S .. (k+1)*S - 1 (S: the shard size), one row per (text, layer, head); its
metadata keeps that block's unreadable records and how many texts were cut. Each shard is written to a temporary
file beside it and renamed into place, so a shard either exists whole or not at all: a scan killed at any moment
resumes at the first missing shard, and a temporary file left behind is never read (it is removed on resume).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np

from qkv_cli.errors import QkvError

INSTALL = "pip install 'qkv-cli[scan]'"
MANIFEST, SUMMARY = "scan.json", "summary.json"
SHARD = re.compile(r"^part-(\d{6,})\.parquet$")
KEYS = ("text_id", "layer", "head", "n_tokens")  # the columns before the scores


def arrow():
    """(pyarrow, pyarrow.parquet), or the one line that says what to install."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise QkvError(f"qkv scan writes Parquet with pyarrow, which is not installed: {INSTALL}") from None
    return pa, pq


def shard_name(k: int) -> str:
    return f"part-{k:06d}.parquet"


def write_atomic(path: Path, data: bytes) -> None:
    """data to path through a temporary file in the same folder, flushed to disk, then renamed."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def prepare(out, manifest: dict, resume: bool) -> set[int]:
    """Make or reopen the scan folder; returns the shards already written (resume). Refuses a folder holding another
    scan, or one that is not empty, unless it is this scan being resumed."""
    arrow()
    folder = Path(out).expanduser()
    if folder.exists() and not folder.is_dir():
        raise QkvError(f"--out {str(out)!r} is a file: give a folder for the scan's shards")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise QkvError(f"--out {str(out)!r} cannot be created: {exc.strerror or exc}") from None
    if not os.access(folder, os.W_OK):
        raise QkvError(f"--out {str(out)!r} is not writable")
    path = folder / MANIFEST
    if path.exists():
        from qkv_cli.files import read_json

        old = read_json(path, 1 << 20)
        if not resume:
            raise QkvError(f"--out {str(out)!r} already holds a scan: add --resume to continue it, or give another "
                           "folder")  # fmt: skip
        if old != manifest:
            changed = sorted(k for k in set(old) | set(manifest) if old.get(k) != manifest.get(k))
            raise QkvError(f"--resume: the scan in {str(out)!r} was made with other settings ({', '.join(changed)} "
                           "differ): give the same corpus, model and options, or another folder")  # fmt: skip
    elif any(p for p in folder.iterdir() if not p.name.startswith(".")):
        raise QkvError(f"--out {str(out)!r} is not empty and holds no scan: give an empty or new folder")
    for stale in folder.glob(".part-*.tmp"):  # a shard whose writing was interrupted: never read
        stale.unlink(missing_ok=True)
    if not path.exists():
        write_atomic(path, json.dumps(manifest, indent=1).encode())
    return done(folder)


def done(folder) -> set[int]:
    return {int(m.group(1)) for p in Path(folder).iterdir() if (m := SHARD.match(p.name))}


def shard_table(columns: list[str], rows: list[dict], problems: list[dict], cut: int, texts: int, records: int):
    """One shard's table: rows are {column: array} blocks (one per text) stacked; metadata: the block's problems,
    texts cut, texts scored and records read."""
    pa, _ = arrow()
    types = {"text_id": pa.int64(), "layer": pa.int32(), "head": pa.int32(), "n_tokens": pa.int32()}
    names = [*KEYS, *columns]
    data = {}
    for name in names:
        parts = [r[name] for r in rows]
        kind = types.get(name, pa.float64())
        dtype = np.float64 if name not in types else (np.int64 if name == "text_id" else np.int32)
        data[name] = pa.array(np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype), type=kind)
    meta = {
        "qkv.problems": json.dumps(problems),
        "qkv.cut": str(cut),
        "qkv.texts": str(texts),
        "qkv.records": str(records),
    }
    return pa.table(data).replace_schema_metadata(meta)


def write_shard(out, k: int, table) -> None:
    import io

    _, pq = arrow()
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    write_atomic(Path(out).expanduser() / shard_name(k), buf.getvalue())


def shards(out) -> list[Path]:
    folder = Path(out).expanduser()
    return [folder / shard_name(k) for k in sorted(done(folder))]


def shard_meta(path: Path) -> dict:
    _, pq = arrow()
    meta = pq.read_schema(path).metadata or {}
    return {
        "problems": json.loads(meta.get(b"qkv.problems", b"[]")),
        "cut": int(meta.get(b"qkv.cut", b"0")),
        "texts": int(meta.get(b"qkv.texts", b"0")),
        "records": int(meta.get(b"qkv.records", b"0")),
    }


def read_table(out):
    """Every row of the scan, ordered by text_id, layer, head (shards in order; each is ordered within)."""
    pa, pq = arrow()
    parts = [pq.read_table(p).replace_schema_metadata(None) for p in shards(out)]
    if not parts:
        raise QkvError(f"{str(out)!r} holds no shard: run the scan first")
    return pa.concat_tables(parts)
