"""`qkv models` lists ollama's and LM Studio's GGUF models by the names --model takes, and --model loads them;
a bad store entry is listed with why, and as --model is one line, exit 2."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from clitools import assert_one_line_error, invoke
from helpers import reference_import
from store_layouts import lmstudio_model, ollama_manifest, ollama_model

TEXT = "the cat sat"


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    from tiny_gguf import write_tiny_gguf

    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_tiny_gguf(reference_import("gguf"), path)
    return path


@pytest.fixture
def stores(tmp_path, monkeypatch, tiny_gguf):
    """An ollama store with tiny:latest and a broken manifest; an LM Studio store with pub/tiny-GGUF."""
    env = {"OLLAMA_MODELS": str(tmp_path / "ollama"), "HOME": str(tmp_path / "home"), "HF_HUB_CACHE": str(tmp_path)}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    data = tiny_gguf.read_bytes()
    blob = ollama_model(tmp_path / "ollama", "tiny", "latest", data)
    ollama_manifest(tmp_path / "ollama", "broken", "latest", b'{"layers": 5}')
    lm = lmstudio_model(tmp_path / "home/.lmstudio/models", "pub", "tiny-GGUF", "tiny-F32.gguf", data)
    return {"blob": blob, "lmstudio": lm, "root": tmp_path / "ollama", "env": env}


def test_models_lists_store_models_by_their_names(stores):
    r = invoke(["models", "--format", "json"])
    assert r.exit_code == 0, r.output
    rows = {row["name"]: row for row in json.loads(r.stdout) if row["source"] in ("ollama", "lmstudio")}
    assert rows["ollama:tiny:latest"]["path"] == str(stores["blob"].resolve())
    assert rows["lmstudio:pub/tiny-GGUF"]["path"] == str(stores["lmstudio"].resolve())
    assert rows["ollama:tiny:latest"]["layers"] == 2 and rows["lmstudio:pub/tiny-GGUF"]["family"] == "llama"
    assert "no list of layers" in rows["ollama:broken:latest"]["error"]


def test_the_models_table_keeps_the_good_entries_and_says_why_one_is_bad(stores):
    r = invoke(["models"])
    assert r.exit_code == 0, r.output
    assert "ollama:tiny:latest" in r.stdout and "lmstudio:pub/tiny-GGUF" in r.stdout
    flat = "".join(r.stdout.split())  # the error line wraps at the terminal width
    assert "ollama:broken:latest:ollamamodel'broken:latest':manifest" in flat and "hasnolistoflayers" in flat
    assert "Traceback" not in r.output


@pytest.mark.parametrize("spec", ["ollama:tiny", "ollama:tiny:latest", "ollama:library/tiny", "lmstudio:pub/tiny-GGUF",
                                  "lmstudio:pub/tiny-GGUF/tiny-F32.gguf"])  # fmt: skip
def test_run_with_a_store_name_runs_the_stored_file(stores, spec):
    """The same numbers as --model FILE; only the name in the first line differs."""
    by_file = invoke(["run", TEXT, "--model", stores["lmstudio"], "--format", "json"])
    by_name = invoke(["run", TEXT, "--model", spec, "--format", "json"])
    assert by_file.exit_code == 0 and by_name.exit_code == 0, by_name.output
    a, b = json.loads(by_file.stdout), json.loads(by_name.stdout)
    for part in ("model", "settings"):  # the name, and only the name, differs
        assert a[part].pop("name") == "tiny-F32" and b[part].pop("name") != "tiny-F32"
    assert a == b and len(a["attentions"]) > 0


def test_the_run_names_the_model_as_its_store_does(stores):
    r = invoke(["run", TEXT, "--model", "ollama:tiny"])
    assert r.exit_code == 0 and r.stdout.startswith("tiny:latest (llama)"), r.output
    r = invoke(["shapes", "--model", "lmstudio:pub/tiny-GGUF/tiny-F32.gguf"])
    assert r.exit_code == 0 and r.stdout.startswith("pub/tiny-GGUF/tiny-F32: family=llama"), r.output


def test_bad_store_names_are_one_line_exit_2(stores, tmp_path):
    outside = tmp_path / "outside.gguf"
    shutil.copy(stores["blob"], outside)
    link = stores["root"] / "blobs" / ("sha256-" + "f" * 64)
    link.symlink_to(outside)
    ollama_manifest(
        stores["root"],
        "linked",
        "latest",
        {"layers": [{"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:" + "f" * 64}]},
    )
    ollama_manifest(
        stores["root"],
        "gone",
        "latest",
        {"layers": [{"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:" + "0" * 64}]},
    )
    ollama_manifest(stores["root"], "huge", "latest", b" " * (2 << 20))  # fmt: skip
    for spec, fragment in (("ollama:broken", "no list of layers"), ("ollama:linked", "outside its store"),
                           ("ollama:gone", "missing"), ("ollama:huge", "larger than"),
                           ("ollama:nope:7b", "'nope:7b' is not in the ollama store"),
                           ("ollama:../passwd", "not a name in the store"),
                           ("lmstudio:pub/none", "is not in"),
                           ("lmstudio:pub", "not lmstudio:PUBLISHER/REPO")):  # fmt: skip
        assert_one_line_error(invoke(["run", TEXT, "--model", spec]), fragment)


def test_the_installed_qkv_lists_and_runs_a_store_model(stores):
    exe = Path(sys.executable).with_name("qkv")
    qkv = str(exe) if exe.exists() else shutil.which("qkv")
    env = os.environ | stores["env"]
    done = subprocess.run([qkv, "models", "--format", "json"], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0 and "ollama:tiny:latest" in done.stdout, done.stderr
    done = subprocess.run([qkv, "run", TEXT, "--model", "ollama:tiny"], capture_output=True, text=True, timeout=120,
                          env=env)  # fmt: skip
    assert done.returncode == 0 and done.stdout.startswith("tiny:latest"), done.stderr
    done = subprocess.run([qkv, "run", TEXT, "--model", "ollama:broken"], capture_output=True, text=True, timeout=120,
                          env=env)  # fmt: skip
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "no list of layers" in done.stderr
