"""ollama's and LM Studio's stores: the names their users type find the GGUF file those tools stored, and every
hostile manifest, path or file is refused in one QkvError (listing keeps the good entries)."""

from __future__ import annotations

import json
import os

import pytest
from helpers import reference_import
from store_layouts import (
    FAKE_GGUF,
    MODEL_LAYER,
    lmstudio_model,
    manifest_doc,
    ollama_blob,
    ollama_manifest,
    ollama_model,
)

from qkv_cli.errors import QkvError
from qkv_cli.models import find_models, resolve_model
from qkv_cli.models.formats.stores import lmstudio_models, name_of, ollama_models


@pytest.fixture
def stores(tmp_path, monkeypatch):
    """(ollama root, LM Studio root, LM Studio's second root), all empty, and no Hugging Face cache."""
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "ollama"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    return tmp_path / "ollama", tmp_path / "home/.lmstudio/models", tmp_path / "home/.cache/lm-studio/models"


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    from tiny_gguf import write_tiny_gguf

    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_tiny_gguf(reference_import("gguf"), path)
    return path.read_bytes()


def names(found):
    return sorted(name for name, _, _ in found)


# --- ollama -----------------------------------------------------------------------------------------------------

WHERE = {
    "ollama:llama3.1:8b": ("llama3.1", "8b", {}),
    "ollama:tiny": ("tiny", "latest", {}),
    "ollama:tiny:latest": ("tiny", "latest", {}),
    "ollama:someone/model:q4": ("model", "q4", {"namespace": "someone"}),
    "ollama:hf.co/bartowski/Llama-GGUF:Q4_K_M": ("Llama-GGUF", "Q4_K_M", {"registry": "hf.co",
                                                                          "namespace": "bartowski"}),
}  # fmt: skip


@pytest.mark.parametrize("spec", WHERE)
def test_an_ollama_name_resolves_to_the_blob_its_manifest_names(stores, spec):
    name, tag, where = WHERE[spec]
    blob = ollama_model(stores[0], name, tag, FAKE_GGUF + spec.encode(), **where)
    ollama_model(stores[0], "other", tag, FAKE_GGUF + b"other")  # another model's blob is never taken
    assert resolve_model(spec) == blob.resolve()


def test_ollama_models_are_listed_by_the_names_ollama_users_type(stores):
    for spec, (name, tag, where) in WHERE.items():
        ollama_model(stores[0], name, tag, FAKE_GGUF + spec.encode(), **where)
    found = ollama_models()
    assert names(found) == sorted(["ollama:llama3.1:8b", "ollama:tiny:latest", "ollama:someone/model:q4",
                                   "ollama:hf.co/bartowski/Llama-GGUF:Q4_K_M"])  # fmt: skip
    assert all(error is None and path.is_file() for _, path, error in found)


def test_the_friendly_name_of_a_spec():
    assert name_of("ollama:llama3.1") == "llama3.1:latest"
    assert name_of("ollama:library/llama3.1:8b") == "llama3.1:8b"
    assert name_of("ollama:ns/x:q") == "ns/x:q"
    assert name_of("lmstudio:pub/repo/file-Q4.gguf") == "pub/repo/file-Q4"
    assert name_of("lmstudio:pub/repo") == "pub/repo"
    assert name_of("org/model") == "" and name_of("./model.gguf") == ""


GOOD = manifest_doc("sha256:" + "e" * 64)


def model_layer(digest, media=MODEL_LAYER) -> dict:
    return {"layers": [{"mediaType": media, "digest": digest}]}


BAD_MANIFESTS = {
    "not json": (b"{layers", "not valid JSON"),
    "not utf-8": (b"\xff\xfe{}", "not UTF-8"),
    "a list": (b"[]", "no list of layers"),
    "layers a string": ({"layers": "model"}, "no list of layers"),
    "no model layer": (model_layer("sha256:" + "e" * 64, "application/vnd.ollama.image.template"), "no model layer"),
    "layers not objects": ({"layers": [3, "x", None]}, "no model layer"),
    "short digest": (model_layer("sha256:abc"), "not sha256"),
    "upper-case digest": (model_layer("sha256:" + "E" * 64), "not sha256"),
    "digest with a path": (model_layer("sha256:../../../etc/passwd"), "not sha256"),
    "digest a number": (model_layer(7), "not sha256"),
    "sha512": (model_layer("sha512:" + "e" * 64), "not sha256"),
    "too large": (b"{" + b" " * (1 << 20) + b"}", "larger than"),
    "missing blob": (GOOD, "missing"),
}


@pytest.mark.parametrize("case", BAD_MANIFESTS)
def test_a_bad_manifest_is_one_error_and_the_listing_keeps_the_good_models(stores, case):
    content, fragment = BAD_MANIFESTS[case]
    good = ollama_model(stores[0], "good", "latest")
    ollama_manifest(stores[0], "bad", "latest", content)
    with pytest.raises(QkvError, match=fragment) as err:
        resolve_model("ollama:bad")
    assert "\n" not in str(err.value) and "ollama model 'bad:latest'" in str(err.value)
    found = {name: (path, error) for name, path, error in ollama_models()}
    assert found["ollama:good:latest"] == (good.resolve(), None)
    assert found["ollama:bad:latest"][0] is None and fragment in found["ollama:bad:latest"][1]


def test_a_blob_linked_out_of_the_store_is_refused(stores, tmp_path):
    outside = tmp_path / "secret.gguf"
    outside.write_bytes(FAKE_GGUF)
    digest = ollama_blob(stores[0], b"placeholder")
    blob = stores[0] / "blobs" / digest.replace(":", "-")
    blob.unlink()
    blob.symlink_to(outside)
    ollama_manifest(stores[0], "linked", "latest", manifest_doc(digest))
    with pytest.raises(QkvError, match="outside its store"):
        resolve_model("ollama:linked")


def test_a_manifest_linked_out_of_the_store_is_refused(stores, tmp_path):
    digest = ollama_blob(stores[0], FAKE_GGUF)
    outside = tmp_path / "manifest.json"
    outside.write_text(json.dumps(manifest_doc(digest)))
    path = ollama_manifest(stores[0], "linked", "latest", b"")
    path.unlink()
    path.symlink_to(outside)
    with pytest.raises(QkvError, match="outside its store"):
        resolve_model("ollama:linked")


def test_a_blob_that_is_a_folder_a_fifo_or_not_gguf_is_refused(stores):
    digest = ollama_blob(stores[0], b"not a model at all")
    ollama_manifest(stores[0], "text", "latest", manifest_doc(digest))
    with pytest.raises(QkvError, match="not a GGUF file"):
        resolve_model("ollama:text")
    for kind, make in (("dir", os.mkdir), ("fifo", os.mkfifo)):
        digest = "sha256:" + (kind.encode().hex() * 64)[:64]
        make(stores[0] / "blobs" / digest.replace(":", "-"))
        ollama_manifest(stores[0], kind, "latest", manifest_doc(digest))
        with pytest.raises(QkvError, match="not a regular file"):
            resolve_model(f"ollama:{kind}")


def test_a_name_not_in_the_store_says_where_it_looked(stores):
    with pytest.raises(QkvError, match=r"'nope:latest' is not in the ollama store .*manifests/registry.ollama.ai"):
        resolve_model("ollama:nope")


@pytest.mark.parametrize("spec", ["ollama:", "ollama:../x", "ollama:./x", "ollama:a/b/c/d", "ollama:x:",
                                  "ollama:x:..", "ollama:a\x1bb", "ollama:a\\b", "lmstudio:p", "lmstudio:p/..",
                                  "lmstudio:p/r/../../x.gguf", "lmstudio:a/b/c/d", "lmstudio:p//f.gguf",
                                  "lmstudio:p/r/notes.txt"])  # fmt: skip
def test_a_malformed_store_name_is_refused(stores, spec):
    with pytest.raises(QkvError) as err:
        resolve_model(spec)
    assert "\x1b" not in str(err.value) and "\n" not in str(err.value)
    assert " is not in " not in str(err.value)  # refused as a name, not looked up


def test_an_empty_or_absent_store_lists_nothing(stores):
    assert ollama_models() == [] and lmstudio_models() == []
    (stores[0] / "manifests/registry.ollama.ai/library/x").mkdir(parents=True)
    assert ollama_models() == []


# --- LM Studio --------------------------------------------------------------------------------------------------


def test_lm_studio_models_resolve_by_repository_and_by_file(stores):
    one = lmstudio_model(stores[1], "lmstudio-community", "Qwen-GGUF", "Qwen-Q4_K_M.gguf")
    lmstudio_model(stores[1], "lmstudio-community", "Qwen-GGUF", "mmproj-Qwen-f16.gguf")  # a projector, not a model
    a = lmstudio_model(stores[1], "bartowski", "Llama-GGUF", "Llama-Q4.gguf")
    b = lmstudio_model(stores[1], "bartowski", "Llama-GGUF", "Llama-Q8.gguf")
    assert resolve_model("lmstudio:lmstudio-community/Qwen-GGUF") == one.resolve()
    assert resolve_model("lmstudio:lmstudio-community/Qwen-GGUF/Qwen-Q4_K_M.gguf") == one.resolve()
    assert resolve_model("lmstudio:bartowski/Llama-GGUF/Llama-Q8.gguf") == b.resolve()
    with pytest.raises(QkvError, match="several models.*Llama-Q4.gguf, Llama-Q8.gguf"):
        resolve_model("lmstudio:bartowski/Llama-GGUF")
    assert names(lmstudio_models()) == ["lmstudio:bartowski/Llama-GGUF/Llama-Q4.gguf",
                                        "lmstudio:bartowski/Llama-GGUF/Llama-Q8.gguf",
                                        "lmstudio:lmstudio-community/Qwen-GGUF"]  # fmt: skip
    assert a.resolve() in {path for _, path, _ in lmstudio_models()}


def test_the_older_lm_studio_folder_is_read_and_the_newer_one_wins(stores):
    old = lmstudio_model(stores[2], "pub", "old-GGUF", "m.gguf")
    assert resolve_model("lmstudio:pub/old-GGUF") == old.resolve()
    new = lmstudio_model(stores[1], "pub", "old-GGUF", "m.gguf", FAKE_GGUF + b"new")
    assert resolve_model("lmstudio:pub/old-GGUF") == new.resolve()
    assert [(n, p) for n, p, _ in lmstudio_models()] == [("lmstudio:pub/old-GGUF", new.resolve())]


def test_an_lm_studio_file_linked_out_of_the_store_is_refused_and_listed_with_why(stores, tmp_path):
    outside = tmp_path / "elsewhere.gguf"
    outside.write_bytes(FAKE_GGUF)
    link = stores[1] / "pub" / "repo" / "m.gguf"
    link.parent.mkdir(parents=True)
    link.symlink_to(outside)
    good = lmstudio_model(stores[1], "pub", "good", "g.gguf")
    for spec in ("lmstudio:pub/repo", "lmstudio:pub/repo/m.gguf"):
        with pytest.raises(QkvError, match="outside its store"):
            resolve_model(spec)
    found = {name: (path, error) for name, path, error in lmstudio_models()}
    assert found["lmstudio:pub/good"] == (good.resolve(), None)
    assert found["lmstudio:pub/repo"][0] is None and "outside its store" in found["lmstudio:pub/repo"][1]


def test_an_lm_studio_name_not_found_names_both_folders(stores):
    with pytest.raises(QkvError, match=r"'pub/none' is not in .*\.lmstudio/models or .*lm-studio/models"):
        resolve_model("lmstudio:pub/none")


def test_control_bytes_are_stripped_from_listed_names(stores):
    lmstudio_model(stores[1], "pub\x1b[31m", "repo\x07", "m.gguf")
    ollama_model(stores[0], "evil\x1b]0;x\x07", "latest")
    listed = names(lmstudio_models()) + names(ollama_models())
    assert listed == ["lmstudio:pub[31m/repo", "ollama:evil]0;x:latest"]


# --- described and loaded ---------------------------------------------------------------------------------------


def test_qkv_models_describes_store_models_from_their_gguf_header(stores, tiny_gguf):
    ollama_model(stores[0], "tiny", "latest", tiny_gguf)
    lmstudio_model(stores[1], "pub", "tiny-GGUF", "tiny-F32.gguf", tiny_gguf)
    ollama_manifest(stores[0], "broken", "latest", b"{")
    rows = {r["name"]: r for r in find_models() if r["source"] in ("ollama", "lmstudio")}
    assert set(rows) == {"ollama:tiny:latest", "lmstudio:pub/tiny-GGUF", "ollama:broken:latest"}
    for name in (
        "ollama:tiny:latest",
        "lmstudio:pub/tiny-GGUF",
    ):  # tests/support/tiny_gguf.py: llama, 2 layers, 2 heads, d 16
        r = rows[name]
        assert (r["family"], r["layers"], r["heads"], r["d"], r["error"]) == ("llama", 2, 2, 16, None)
        assert r["size_bytes"] == len(tiny_gguf)
    assert rows["ollama:broken:latest"]["error"] and rows["ollama:broken:latest"]["family"] == "?"


def test_a_store_model_loads_under_its_friendly_name(stores, tiny_gguf):
    from qkv_cli.pipeline.checkpoint import load

    ollama_model(stores[0], "tiny", "latest", tiny_gguf)
    lmstudio_model(stores[1], "pub", "tiny-GGUF", "tiny-F32.gguf", tiny_gguf)
    for spec, name in (
        ("ollama:tiny", "tiny:latest"),
        ("lmstudio:pub/tiny-GGUF/tiny-F32.gguf", "pub/tiny-GGUF/tiny-F32"),
    ):
        model = load(spec, "float32")
        assert model.config.name == name and model.config.n_layers == 2
