"""`qkv models`: the checkpoints qkv can find, in the Hugging Face cache, in installed packages and in ollama's and
LM Studio's stores.

Each is described from its config.json or GGUF header only. One bad entry (a broken config, a hostile ref, an
unreadable file) is listed with its error; it never stops the listing.
"""

from __future__ import annotations

from pathlib import Path

from qkv_cli.errors import QkvError
from qkv_cli.models.formats.find import _cache_snapshot, hub_cache, installed_packages, is_gguf, shipped_models
from qkv_cli.models.formats.safetensors import INDEX, WEIGHTS

FIELDS = ("name", "path", "source", "package", "family", "layers", "heads", "kv_heads", "d", "vocab_size",
          "size_bytes", "error")  # fmt: skip


def _size_on_disk(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    total = 0
    for p in path.iterdir():
        try:
            if p.is_file():
                total += p.stat().st_size  # follows the hub cache's symlinks to the blobs
        except OSError:
            pass
    return total


def config_of(path: Path, name: str):
    """The ModelConfig of a folder's config.json or of a GGUF file's metadata (no weights are read)."""
    from qkv_cli.models.families.registry import config_from_dict, read_config

    if not is_gguf(path):
        return read_config(path, name)
    from qkv_cli.models.formats.gguf.mapping import config_dict
    from qkv_cli.models.formats.gguf.reader import read_gguf

    gguf = read_gguf(path)
    return config_from_dict(config_dict(gguf.metadata, gguf.tensors, f"GGUF file '{path.name}'"), name)


def describe(path: Path, name: str, source: str, package: str = "") -> dict | None:
    """One row of `qkv models`, or None when the folder holds no weights at all."""
    if path.is_dir() and not ((path / WEIGHTS).is_file() or (path / INDEX).is_file()):
        return None
    row = dict.fromkeys(FIELDS) | {"name": name, "path": str(path), "source": source, "package": package}
    try:
        row["size_bytes"] = _size_on_disk(path)
        c = config_of(path, name)
    except (QkvError, OSError, RecursionError, ValueError) as exc:
        return row | {"family": "?", "error": str(exc).splitlines()[0] if str(exc) else type(exc).__name__}
    return row | {"family": c.family, "layers": c.n_layers, "heads": c.n_heads, "kv_heads": c.n_kv_heads, "d": c.d,
                  "vocab_size": c.vocab_size}  # fmt: skip


def cache_models() -> list[dict]:
    root = hub_cache()
    rows = []
    try:
        repos = sorted(root.glob("models--*")) if root.is_dir() else []
    except OSError:
        return rows
    for repo in repos:
        repo_id = repo.name[len("models--") :].replace("--", "/")
        try:
            snap = _cache_snapshot(repo_id)
        except OSError:
            snap = None
        if snap is not None and (row := describe(snap, repo_id, "hf-cache")) is not None:
            rows.append(row)
        elif snap is None and (repo / "refs" / "main").exists():  # a ref that names no snapshot: shown, marked
            why = "its refs/main does not name a snapshot folder (a short commit name is expected)"
            rows.append(dict.fromkeys(FIELDS) | {"name": repo_id, "path": str(repo), "source": "hf-cache",
                                                 "package": "", "family": "?", "error": why})  # fmt: skip
    return rows


def package_models() -> list[dict]:
    """Checkpoints shipped inside installed packages (folders or .gguf files); only directory listings."""
    rows, seen = [], set()
    for pkg in installed_packages():
        found = shipped_models(pkg)
        for path in found:
            if path.resolve() in seen:
                continue
            seen.add(path.resolve())
            name = pkg.name if path == pkg or len(found) == 1 else f"{pkg.name}/{path.name}"
            if (row := describe(path, name, "package", package=pkg.name)) is not None:
                rows.append(row)
    return rows


def store_models() -> list[dict]:
    """The GGUF models of ollama's and LM Studio's stores; a bad manifest or file is a row with its error."""
    from qkv_cli.models.formats.stores import lmstudio_models, ollama_models

    rows = []
    for source, found in (("ollama", ollama_models()), ("lmstudio", lmstudio_models())):
        for name, path, error in found:
            if path is None:
                rows.append(dict.fromkeys(FIELDS) | {"name": name, "source": source, "package": "", "family": "?",
                                                     "error": error.splitlines()[0]})  # fmt: skip
            elif (row := describe(path, name, source)) is not None:
                rows.append(row)
    return rows


def find_models() -> list[dict]:
    """Checkpoints qkv can load: the Hugging Face cache, installed packages that ship one, and the GGUF models of
    ollama's and LM Studio's stores.

    Each row: name, path, source ("hf-cache", "package", "ollama" or "lmstudio"), package, family, layers, heads,
    kv_heads, d, vocab_size, size_bytes, error (None, or why the checkpoint could not be described)."""
    return cache_models() + package_models() + store_models()
