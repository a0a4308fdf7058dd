"""Where checkpoints live: a local folder, a name in the Hugging Face cache, an installed package that ships one,
or (with --download) the Hub; and the list `qkv models` prints. Nothing here reads weights.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from qkv_cli.errors import QkvError
from qkv_cli.models.config import ModelConfig, read_config
from qkv_cli.models.weights import INDEX, WEIGHTS

NEEDED = ("config.json", WEIGHTS, "tokenizer.json")
PICKLES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5", "flax_model.msgpack")
DOWNLOAD_HINT = "pip install 'qkv-cli[download]'"


# --- where models live --------------------------------------------------------------------------------


def hub_cache() -> Path:
    """The Hugging Face hub cache: HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.environ[var]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def _cache_snapshot(repo_id: str, revision: str | None = None) -> Path | None:
    """The snapshot folder of `repo_id` in the hub cache (refs/<revision or main> first), or None."""
    repo = hub_cache() / ("models--" + repo_id.replace("/", "--"))
    snapshots = repo / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = repo / "refs" / (revision or "main")
    if ref.is_file():
        commit = ref.read_text().strip()
        if (snapshots / commit / "config.json").is_file():
            return snapshots / commit
    if revision and (snapshots / revision / "config.json").is_file():
        return snapshots / revision
    if revision:
        return None
    found = [s for s in snapshots.iterdir() if (s / "config.json").is_file()]
    return max(found, key=lambda s: s.stat().st_mtime) if found else None


def _looks_like_repo_id(spec: str) -> bool:
    parts = spec.split("/")
    return 1 <= len(parts) <= 2 and all(parts) and not spec.startswith((".", "~", "/"))


def resolve_model(spec: str, download: bool = False) -> Path:
    """A model folder for `spec`: an existing folder, an installed package's model, or a Hub name (org/name[@rev])
    found in the local Hugging Face cache. Only with download=True is a missing name fetched from the Hub."""
    path = Path(spec).expanduser()
    if path.exists():
        if not path.is_dir():
            raise QkvError(
                f"--model '{spec}' is a file: give the folder that holds config.json, {WEIGHTS} and tokenizer.json"
            )
        check_folder(path)
        return path
    if not _looks_like_repo_id(spec):
        raise QkvError(f"model folder '{spec}' does not exist")
    repo_id, _, revision = spec.partition("@")
    snap = _cache_snapshot(repo_id, revision or None)
    if snap is not None:
        try:
            check_folder(snap)
            return snap
        except QkvError:
            if not download:  # an incomplete snapshot: --download fetches the missing files
                raise
            return _download(repo_id, revision or None)
    for entry in _package_models():  # an installed package that ships a model: its import or pip name
        if spec in (entry["name"], entry["package"]) or spec.replace("-", "_") == entry["package"]:
            return Path(entry["path"])
    if not download:
        raise QkvError(
            f"model '{spec}' is not a folder and not in the Hugging Face cache ({hub_cache()}): "
            f"pass --download to fetch it (needs {DOWNLOAD_HINT}), or give a local folder"
        )
    return _download(repo_id, revision or None)


def _download(repo_id: str, revision: str | None) -> Path:
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise QkvError(f"--download needs huggingface_hub: {DOWNLOAD_HINT}") from None
    try:
        folder = snapshot_download(
            repo_id,
            revision=revision,
            cache_dir=hub_cache(),
            allow_patterns=["config.json", WEIGHTS, "model-*.safetensors", INDEX, "tokenizer.json"],
        )
    except Exception as exc:  # network, authentication, unknown repository: one line for the user
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise QkvError(f"could not download '{repo_id}': {first}") from None
    folder = Path(folder)
    check_folder(folder)
    return folder


def check_folder(folder: Path) -> None:
    """QkvError unless `folder` has config.json, safetensors weights and tokenizer.json; .bin-only is refused."""
    has_weights = (folder / WEIGHTS).is_file() or (folder / INDEX).is_file()
    if not has_weights:
        pickles = [p for p in PICKLES if (folder / p).exists()]
        if pickles:
            raise QkvError(
                f"'{folder}' has only {pickles[0]}: qkv reads {WEIGHTS} and never unpickles .bin files "
                "(unpickling can run code). Convert it once with transformers: "
                "AutoModel.from_pretrained(folder).save_pretrained(out, safe_serialization=True), "
                "or fetch a repository that ships model.safetensors"
            )
        raise QkvError(f"no {WEIGHTS} in '{folder}': a model folder needs {', '.join(NEEDED)}")
    for name in ("config.json", "tokenizer.json"):
        if not (folder / name).is_file():
            raise QkvError(f"no {name} in '{folder}': a model folder needs {', '.join(NEEDED)}")


def display_name(folder: Path) -> str:
    """'org/name' for a hub-cache snapshot, else the folder name (or package/folder for a shipped model)."""
    parts = folder.resolve().parts
    if len(parts) >= 3 and parts[-2] == "snapshots" and parts[-3].startswith("models--"):
        return parts[-3][len("models--") :].replace("--", "/")
    if folder.name == "model":
        return folder.resolve().parent.name
    return folder.name


# --- qkv models ---------------------------------------------------------------------------------------


def _size_on_disk(folder: Path) -> int:
    total = 0
    for p in folder.iterdir():
        try:
            if p.is_file():
                total += p.stat().st_size  # follows the hub cache's symlinks to the blobs
        except OSError:
            pass
    return total


def _describe(folder: Path, name: str, source: str, package: str = "") -> dict | None:
    """One row of `qkv models`, or None when the folder is not a usable checkpoint."""
    if not ((folder / WEIGHTS).is_file() or (folder / INDEX).is_file()):
        return None
    try:
        config: ModelConfig = read_config(folder, name)
    except QkvError as exc:
        return {
            "name": name,
            "path": str(folder),
            "source": source,
            "package": package,
            "family": "?",
            "layers": None,
            "heads": None,
            "d": None,
            "vocab_size": None,
            "size_bytes": _size_on_disk(folder),
            "error": str(exc),
        }
    return {
        "name": name,
        "path": str(folder),
        "source": source,
        "package": package,
        "family": config.family,
        "layers": config.n_layers,
        "heads": config.n_heads,
        "d": config.d,
        "vocab_size": config.vocab_size,
        "size_bytes": _size_on_disk(folder),
        "error": None,
    }


def _cache_models() -> list[dict]:
    root = hub_cache()
    rows = []
    if not root.is_dir():
        return rows
    for repo in sorted(root.glob("models--*")):
        repo_id = repo.name[len("models--") :].replace("--", "/")
        snap = _cache_snapshot(repo_id)
        if snap is not None:
            row = _describe(snap, repo_id, "hf-cache")
            if row is not None:
                rows.append(row)
    return rows


def _package_models() -> list[dict]:
    """Checkpoints shipped inside installed packages: <site-packages>/<pkg>/config.json or <pkg>/<sub>/config.json
    next to model.safetensors. Only directory listings: nothing is imported."""
    rows, seen = [], set()
    for entry in sys.path:
        base = Path(entry or ".")
        if not base.is_dir() or not ("site-packages" in base.parts or "dist-packages" in base.parts):
            continue
        try:
            packages = [p for p in base.iterdir() if p.is_dir() and p.name.isidentifier()]
        except OSError:
            continue
        for pkg in packages:
            candidates = [pkg, *(c for c in _subdirs(pkg))]
            for folder in candidates:
                if (folder / "config.json").is_file() and (folder / "tokenizer.json").is_file():
                    key = folder.resolve()
                    if key in seen:
                        continue
                    seen.add(key)
                    row = _describe(
                        folder, pkg.name if folder == pkg else f"{pkg.name}/{folder.name}", "package", package=pkg.name
                    )
                    if row is not None:
                        rows.append(row)
    return rows


def _subdirs(pkg: Path):
    try:
        return [c for c in pkg.iterdir() if c.is_dir() and not c.name.startswith((".", "__"))]
    except OSError:
        return []


def find_models() -> list[dict]:
    """Checkpoints qkv can load: the Hugging Face cache and installed packages that ship one.

    Each row: name, path, source ("hf-cache" or "package"), package, family, layers, heads, d, vocab_size,
    size_bytes, error (None, or why the config could not be read)."""
    return _cache_models() + _package_models()
