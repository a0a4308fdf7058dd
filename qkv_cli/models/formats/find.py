"""Where checkpoints live: a local folder or GGUF file, a name in the Hugging Face cache, an installed package that
ships one (found with importlib.util.find_spec, never imported), or (with --download) the Hub. Nothing here reads
weights; catalog.py lists what it finds for `qkv models`.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from qkv_cli.errors import QkvError
from qkv_cli.files import open_regular
from qkv_cli.models.formats.safetensors import INDEX, WEIGHTS

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


def _ref(repo: Path, revision: str | None) -> str | None:
    """The commit a ref names (refs/main by default): a short plain name, never a path; None when unusable."""
    ref = repo / "refs" / (revision or "main")
    try:
        with open_regular(ref, "hub cache ref") as handle:
            commit = handle.read(257).decode("ascii").strip()
    except (QkvError, OSError, UnicodeDecodeError):
        return None
    if not commit or len(commit) > 256 or not all(c.isalnum() or c in "-_" for c in commit):
        return None  # an absolute path, a '../', binary junk: not a commit
    return commit


def _cache_snapshot(repo_id: str, revision: str | None = None) -> Path | None:
    """The snapshot folder of `repo_id` in the hub cache (refs/<revision or main> first), or None."""
    repo = hub_cache() / ("models--" + repo_id.replace("/", "--"))
    snapshots = repo / "snapshots"
    if not snapshots.is_dir():
        return None
    commit = _ref(repo, revision)
    if commit is not None and (snapshots / commit / "config.json").is_file():
        return snapshots / commit
    if revision and "/" not in revision and ".." not in revision and (snapshots / revision / "config.json").is_file():
        return snapshots / revision
    if revision:
        return None
    found = [s for s in snapshots.iterdir() if (s / "config.json").is_file()]
    return max(found, key=lambda s: s.stat().st_mtime) if found else None


def _looks_like_repo_id(spec: str) -> bool:
    parts = spec.split("/")
    return 1 <= len(parts) <= 2 and all(parts) and not spec.startswith((".", "~", "/"))


def is_gguf(path: Path) -> bool:
    """A GGUF file (llama.cpp): by its name, or by its first four bytes."""
    if path.suffix.lower() == ".gguf":
        return True
    try:
        with open(path, "rb") as handle:
            return path.is_file() and handle.read(4) == b"GGUF"
    except OSError:
        return False


def resolve_model(spec: str, download: bool = False) -> Path:
    """A model folder or GGUF file for `spec`: an existing folder or .gguf file, an installed package's model, a Hub
    name (org/name[@rev]) in the local Hugging Face cache, or a model of ollama's or LM Studio's store (stores.py).
    Only with download=True is a missing Hub name fetched."""
    from qkv_cli.files import is_file_name

    if not is_file_name(spec):
        raise QkvError(f"--model {spec!r} is not a file or folder name")
    from qkv_cli.models.formats.stores import is_store_spec, resolve_store

    if is_store_spec(spec):  # ollama:NAME[:TAG], lmstudio:PUBLISHER/REPO[/FILE.gguf]
        return resolve_store(spec)
    path = Path(spec).expanduser()
    if path.exists():
        if not path.is_dir():
            if is_gguf(path):
                return path
            raise QkvError(f"--model '{spec}' is a file but not a GGUF file: give a .gguf file or the folder that "
                           f"holds config.json, {WEIGHTS} and tokenizer.json")  # fmt: skip
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
    shipped = package_model(spec)  # an installed package that ships a model: its import or pip name
    if shipped is not None:
        return shipped
    if not download:
        hint = did_you_mean(spec)
        raise QkvError(
            f"model '{spec}' is not a folder and not in the Hugging Face cache ({hub_cache()}): {hint}"
            f"{'else ' if hint else ''}pass --download to fetch it (needs {DOWNLOAD_HINT}), or give a local folder"
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
            spm = [p for p in ("source.spm", "target.spm", "spiece.model") if (folder / p).is_file()]
            if name == "tokenizer.json" and spm:  # a Marian (or old T5) folder: SentencePiece models only
                raise QkvError(f"no tokenizer.json in '{folder}', only {' and '.join(spm)} (SentencePiece models): "
                               "qkv reads the tokenizer from a tokenizer.json, which this folder does not ship; "
                               "use an export of the model that has one")  # fmt: skip
            raise QkvError(f"no {name} in '{folder}': a model folder needs {', '.join(NEEDED)}")


def display_name(folder: Path) -> str:
    """'org/name' for a hub-cache snapshot, else the folder name (or package/folder for a shipped model)."""
    parts = folder.resolve().parts
    if len(parts) >= 3 and parts[-2] == "snapshots" and parts[-3].startswith("models--"):
        return parts[-3][len("models--") :].replace("--", "/")
    if folder.name == "model":
        return folder.resolve().parent.name
    return folder.name


def package_model(spec: str) -> Path | None:
    """The model an installed package ships (`pkg`, `pkg-name` or `pkg/sub`): a folder with config.json and
    tokenizer.json, or a .gguf file, inside the package's folder. The package is located, never imported."""
    import importlib.util

    top, _, sub = spec.replace("-", "_").partition("/")
    if not top.isidentifier():
        return None
    try:
        found = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if found is None or not found.submodule_search_locations:
        return None
    for base in (Path(p) for p in found.submodule_search_locations):
        for candidate in shipped_models(base):
            if not sub or candidate.name == sub or candidate.stem == sub:
                return candidate
    return None


def shipped_models(pkg: Path) -> list[Path]:
    """Model folders and .gguf files inside a package folder and its immediate subfolders."""
    out = []
    for folder in [pkg, *_subdirs(pkg)]:
        if (folder / "config.json").is_file() and (folder / "tokenizer.json").is_file():
            out.append(folder)
        try:
            out += sorted(p for p in folder.glob("*.gguf") if p.is_file())
        except OSError:
            pass
    return out


def _subdirs(pkg: Path):
    try:
        return [c for c in pkg.iterdir() if c.is_dir() and not c.name.startswith((".", "__"))]
    except OSError:
        return []


def model_names() -> list[str]:
    """The names `--model` finds, from directory listings alone: cached org/name ids and packages shipping one."""
    names = []
    root = hub_cache()
    try:
        names += [r.name[len("models--") :].replace("--", "/") for r in root.glob("models--*")] if root.is_dir() else []
    except OSError:
        pass
    for pkg in installed_packages():
        found = shipped_models(pkg)
        names += [pkg.name] if found else []
        names += [f"{pkg.name}/{p.name}" for p in found if len(found) > 1 and p != pkg]
    return list(dict.fromkeys(names))


def did_you_mean(spec: str, names: list[str] | None = None) -> str:
    """ "did you mean 'X'? " for the known names closest to `spec` (difflib; case aside, and by the part after
    org/ too), or "" when none is close."""
    import difflib

    names = model_names() if names is None else names
    by_key = {}
    for name in names:
        for key in (name.lower(), name.rpartition("/")[2].lower()):
            by_key.setdefault(key, name)
    close = difflib.get_close_matches(spec.lower(), list(by_key), n=3, cutoff=0.6)
    close = list(dict.fromkeys(by_key[k] for k in close))
    return f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""


def installed_packages():
    """The folders of installed packages (site-packages and dist-packages on sys.path), by directory listing."""
    for entry in sys.path:
        base = Path(entry or ".")
        if not ("site-packages" in base.parts or "dist-packages" in base.parts) or not base.is_dir():
            continue
        try:
            packages = [p for p in base.iterdir() if p.is_dir() and p.name.isidentifier()]
        except OSError:
            continue
        yield from packages
