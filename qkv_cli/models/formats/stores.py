"""The GGUF models of other tools' stores, by the names their users type: ollama's (`ollama:llama3.1:8b`) and
LM Studio's (`lmstudio:publisher/repo[/file.gguf]`). Nothing here reads weights.

ollama (OLLAMA_MODELS, else ~/.ollama/models): manifests/<registry>/<namespace>/<name>/<tag> is a JSON file whose
layer of mediaType application/vnd.ollama.image.model names a digest sha256:<hex>, stored as blobs/sha256-<hex>.
Names elide registry.ollama.ai and the `library` namespace, as ollama does; the tag is `latest` when left out.
LM Studio (~/.lmstudio/models, ~/.cache/lm-studio/models): <publisher>/<repo>/<file>.gguf; `publisher/repo` names
the repository's one model file (mmproj-* files are vision projectors, not models).

Every file is untrusted: manifests are read bounded and checked field by field, and every path is resolved and
kept inside its store (no symlink out), regular files only.
"""

from __future__ import annotations

import os
import re
import stat
from itertools import islice
from pathlib import Path

from qkv_cli.errors import QkvError
from qkv_cli.files import parse_json, read_regular

OLLAMA, LMSTUDIO = "ollama:", "lmstudio:"
REGISTRY, NAMESPACE = "registry.ollama.ai", "library"
MODEL_LAYER = "application/vnd.ollama.image.model"
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
MANIFEST_LIMIT = 1 << 20  # a manifest is a few hundred bytes
MAX_ENTRIES = 10_000  # per folder listed: a hostile store cannot make `qkv models` walk forever
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def shown(text: str) -> str:
    """A name from a file name, its control bytes stripped."""
    return _CONTROL.sub("", text)


def ollama_root() -> Path:
    return Path(os.environ.get("OLLAMA_MODELS") or Path.home() / ".ollama" / "models").expanduser()


def lmstudio_roots() -> list[Path]:
    return [Path.home() / ".lmstudio" / "models", Path.home() / ".cache" / "lm-studio" / "models"]


def is_store_spec(spec: str) -> bool:
    return spec.startswith((OLLAMA, LMSTUDIO))


# --- paths kept inside the store --------------------------------------------------------------------------------


def _part(text: str, spec: str) -> str:
    """One component of a store name: a plain file name, never '..', a separator or a control byte."""
    if not text or text in (".", "..") or "/" in text or "\\" in text or _CONTROL.search(text):
        raise QkvError(f"--model {shown(spec)!r}: {shown(text)!r} is not a name in the store")
    return text


def _inside(root: Path, path: Path, what: str) -> Path:
    """`path` resolved, refused unless it is a regular file inside `root` (a symlink out of the store is refused)."""
    real = path.resolve()
    if not real.is_relative_to(root.resolve()):
        raise QkvError(f"{what} '{shown(str(path))}' points outside its store '{root}'")
    try:
        mode = os.stat(real).st_mode
    except OSError:
        raise QkvError(f"{what} '{shown(str(path))}' is missing") from None
    if not stat.S_ISREG(mode):
        raise QkvError(f"{what} '{shown(str(path))}' is not a regular file")
    return real


def _listed(folder: Path) -> list[Path]:
    try:
        return sorted(islice(folder.iterdir(), MAX_ENTRIES)) if folder.is_dir() else []
    except OSError:
        return []


# --- ollama -----------------------------------------------------------------------------------------------------


def ollama_name(registry: str, namespace: str, name: str, tag: str) -> str:
    """The name ollama users type: registry.ollama.ai and the library namespace left out."""
    if registry != REGISTRY:
        return f"{registry}/{namespace}/{name}:{tag}"
    return f"{name}:{tag}" if namespace == NAMESPACE else f"{namespace}/{name}:{tag}"


def _ollama_parts(spec: str) -> tuple[str, str, str, str]:
    """(registry, namespace, name, tag) of ollama:[[registry/]namespace/]name[:tag]."""
    head, _, last = spec[len(OLLAMA) :].rpartition("/")
    name, colon, tag = last.partition(":")
    parts = [*head.split("/"), name] if head else [name]
    if len(parts) > 3 or (colon and not tag):
        raise QkvError(f"--model {shown(spec)!r} is not ollama:NAME[:TAG] (or ollama:NAMESPACE/NAME[:TAG])")
    registry, namespace, name = [_part(p, spec) for p in [REGISTRY, NAMESPACE][: 3 - len(parts)] + parts]
    return registry, namespace, name, _part(tag or "latest", spec)


def ollama_blob(root: Path, manifest: Path, what: str) -> Path:
    """The GGUF blob a manifest names, checked: bounded JSON, one model layer, a sha256 digest, a file in blobs/."""
    data = read_regular(_inside(root, manifest, f"{what}: manifest"), MANIFEST_LIMIT, f"{what}: manifest")
    try:
        doc = parse_json(data, shown(str(manifest)))
    except QkvError as exc:
        raise QkvError(f"{what}: manifest {exc}") from None
    layers = doc.get("layers") if isinstance(doc, dict) else None
    if not isinstance(layers, list):
        raise QkvError(f"{what}: manifest '{shown(str(manifest))}' has no list of layers")
    digests = [x.get("digest") for x in layers if isinstance(x, dict) and x.get("mediaType") == MODEL_LAYER]
    if not digests:
        raise QkvError(f"{what}: manifest '{shown(str(manifest))}' has no model layer ({MODEL_LAYER})")
    digest = digests[0]
    if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
        raise QkvError(f"{what}: manifest names the digest {shown(str(digest))[:80]!r}, not sha256:<64 hex digits>")
    blob = _inside(root / "blobs", root / "blobs" / digest.replace(":", "-"), f"{what}: blob")
    try:
        with open(blob, "rb") as handle:
            magic = handle.read(4)
    except OSError as exc:
        raise QkvError(f"{what}: cannot read blob '{blob}': {exc.strerror or exc}") from None
    if magic != b"GGUF":
        raise QkvError(f"{what}: blob '{blob}' is not a GGUF file")
    return blob


def resolve_ollama(spec: str) -> Path:
    registry, namespace, name, tag = _ollama_parts(spec)
    root, what = ollama_root(), f"ollama model '{ollama_name(registry, namespace, name, tag)}'"
    manifest = root / "manifests" / registry / namespace / name / tag
    if not os.path.lexists(manifest):
        raise QkvError(f"{what} is not in the ollama store '{root}' (no {manifest.relative_to(root)}): "
                       "`qkv models` lists the models qkv finds")  # fmt: skip
    return ollama_blob(root, manifest, what)


def ollama_models() -> list[tuple[str, Path | None, str | None]]:
    """(name for --model, GGUF blob or None, error or None) for every manifest of the ollama store."""
    root, out = ollama_root(), []
    for registry in _listed(root / "manifests"):
        for namespace in _listed(registry):
            for model in _listed(namespace):
                for tag in _listed(model):
                    name = shown(ollama_name(registry.name, namespace.name, model.name, tag.name))
                    try:
                        out.append((OLLAMA + name, ollama_blob(root, tag, f"ollama model '{name}'"), None))
                    except (QkvError, OSError) as exc:
                        out.append((OLLAMA + name, None, str(exc)))
    return out


# --- LM Studio --------------------------------------------------------------------------------------------------


def _model_files(repo: Path) -> list[Path]:
    """The .gguf model files of a repository folder (mmproj-* projectors left out)."""
    return [p for p in _listed(repo) if p.suffix.lower() == ".gguf" and not p.name.lower().startswith("mmproj")]


def resolve_lmstudio(spec: str) -> Path:
    parts = spec[len(LMSTUDIO) :].split("/")
    if len(parts) not in (2, 3):
        raise QkvError(f"--model {shown(spec)!r} is not lmstudio:PUBLISHER/REPO or lmstudio:PUBLISHER/REPO/FILE.gguf")
    parts = [_part(p, spec) for p in parts]
    if len(parts) == 3 and not parts[2].lower().endswith(".gguf"):
        raise QkvError(f"--model {shown(spec)!r}: LM Studio's model files are .gguf files")
    roots = lmstudio_roots()
    for root in roots:
        repo = root / parts[0] / parts[1]
        if len(parts) == 3 and os.path.lexists(repo / parts[2]):
            return _inside(root, repo / parts[2], "LM Studio model")
        files = _model_files(repo) if len(parts) == 2 else []
        if len(files) > 1:
            names = ", ".join(shown(f.name) for f in files[:5])
            raise QkvError(f"LM Studio repository '{shown(spec)}' holds several models ({names}): "
                           f"name one, as {shown(spec)}/FILE.gguf")  # fmt: skip
        if files:
            return _inside(root, files[0], "LM Studio model")
    raise QkvError(f"LM Studio model '{shown(spec[len(LMSTUDIO) :])}' is not in {' or '.join(map(str, roots))}")


def lmstudio_models() -> list[tuple[str, Path | None, str | None]]:
    """(name for --model, GGUF file or None, error or None) for every model file of the LM Studio stores."""
    out, seen = [], set()
    for root in lmstudio_roots():
        for publisher in _listed(root):
            for repo in _listed(publisher):
                files = _model_files(repo)
                for f in files:
                    short = f"{publisher.name}/{repo.name}" + ("" if len(files) == 1 else f"/{f.name}")
                    name = LMSTUDIO + shown(short)
                    if name in seen:
                        continue  # the first store holds what the name loads
                    seen.add(name)
                    try:
                        out.append((name, _inside(root, f, "LM Studio model"), None))
                    except QkvError as exc:
                        out.append((name, None, str(exc)))
    return out


# --- for --model ------------------------------------------------------------------------------------------------


def resolve_store(spec: str) -> Path:
    """The GGUF file an ollama: or lmstudio: name loads."""
    return resolve_ollama(spec) if spec.startswith(OLLAMA) else resolve_lmstudio(spec)


def name_of(spec: str) -> str:
    """The friendly name of a store spec (`llama3.1:8b`, `publisher/repo/file`), '' for any other --model."""
    if spec.startswith(OLLAMA):
        try:
            return shown(ollama_name(*_ollama_parts(spec)))
        except QkvError:
            return ""
    if spec.startswith(LMSTUDIO):
        return shown(spec[len(LMSTUDIO) :].removesuffix(".gguf"))
    return ""
