"""ollama's and LM Studio's model stores written by hand, in the layouts those tools use on disk."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

MODEL_LAYER = "application/vnd.ollama.image.model"
FAKE_GGUF = b"GGUF" + bytes(60)  # enough for finding a file: the GGUF magic, nothing loadable


def ollama_blob(root: Path, data: bytes) -> str:
    """Store `data` as ollama does (blobs/sha256-<hex>); its digest, sha256:<hex>."""
    hexdigest = hashlib.sha256(data).hexdigest()
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    (root / "blobs" / f"sha256-{hexdigest}").write_bytes(data)
    return f"sha256:{hexdigest}"


def manifest_doc(digest: str) -> dict:
    """A manifest as `ollama pull` writes it: config, model, template and params layers."""
    return {
        "schemaVersion": 2,
        "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": "sha256:" + "c" * 64},
        "layers": [
            {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "a" * 64, "size": 10},
            {"mediaType": MODEL_LAYER, "digest": digest, "size": 64},
            {"mediaType": "application/vnd.ollama.image.params", "digest": "sha256:" + "b" * 64, "size": 10},
        ],
    }


def ollama_manifest(root: Path, name: str, tag: str, content, registry="registry.ollama.ai", namespace="library"):
    """manifests/<registry>/<namespace>/<name>/<tag>: `content` a dict (as JSON) or raw bytes."""
    path = root / "manifests" / registry / namespace / name / tag
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
    return path


def ollama_model(root: Path, name: str, tag: str, data: bytes = FAKE_GGUF, **where) -> Path:
    """A pulled model: its blob and its manifest; the blob's path."""
    digest = ollama_blob(root, data)
    ollama_manifest(root, name, tag, manifest_doc(digest), **where)
    return root / "blobs" / digest.replace(":", "-")


def lmstudio_model(root: Path, publisher: str, repo: str, file: str, data: bytes = FAKE_GGUF) -> Path:
    path = root / publisher / repo / file
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path
