"""GGUF files: files written by gguf-py's GGUFWriter and the shipped SmolLM2 file read the same as gguf-py's
GGUFReader and dequantize (metadata and every value, bit for bit), and hostile files refused in one line, before
anything large is allocated."""

from __future__ import annotations

import os
import struct
import subprocess
import sys

import numpy as np
import pytest
from helpers import reference_import, smollm2_gguf

from qkv_cli.errors import QkvError
from qkv_cli.models.formats.gguf.reader import read_gguf
from qkv_cli.models.quants.dequantize import QUANT_TYPES

# --- GGUF bytes by hand (no gguf-py): the layout of the spec, for files gguf-py would refuse to write ------------


def gstr(text) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def kv(key, vtype: int, payload: bytes) -> bytes:
    return gstr(key) + struct.pack("<I", vtype) + payload


def u32(key, value: int) -> bytes:
    return kv(key, 4, struct.pack("<I", value))


def info(name, dims, type_id=0, offset=0) -> bytes:  # dims fastest first, as GGUF stores them
    return gstr(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, type_id, offset)


def gguf_bytes(kvs=(), infos=(), data=b"", version=3, counts=None, align=32) -> bytes:
    n_tensors, n_kv = counts or (len(infos), len(kvs))
    head = b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv) + b"".join(kvs) + b"".join(infos)
    return head + bytes(-len(head) % align) + data


W = np.arange(6, dtype="<f4")  # tensor "w": GGUF dims [3, 2] -> shape (2, 3)
VALID = gguf_bytes([gstr("general.architecture") + struct.pack("<I", 8) + gstr("llama")], [info("w", [3, 2])],
                   W.tobytes())  # fmt: skip


def write(tmp_path, data: bytes, name="model.gguf"):
    path = tmp_path / name
    path.write_bytes(data)
    return path


def test_hand_built_file(tmp_path):
    kvs = [u32("a.u32", 7), kv("a.f32", 6, struct.pack("<f", 0.1)), kv("a.bool", 7, b"\x01"),
           kv("a.str", 8, gstr("héllo")), kv("a.strs", 9, struct.pack("<IQ", 8, 3) + gstr("x") + gstr("") + gstr("ü")),
           kv("a.i16s", 9, struct.pack("<IQ3h", 3, 3, -1, 0, 2)), kv("a.bools", 9, struct.pack("<IQ3B", 7, 3, 1, 0, 2)),
           kv("a.nested", 9, struct.pack("<IQIQ", 9, 2, 8, 1) + gstr("a") + struct.pack("<IQb", 1, 1, -3)),
           u32("general.alignment", 64)]  # fmt: skip
    f16 = np.array([1.5, -2, 0.25, 8], "<f2")
    data = W.tobytes() + bytes(64 - 24) + f16.tobytes()
    g = read_gguf(write(tmp_path, gguf_bytes(kvs, [info("w", [3, 2]), info("h", [2, 1, 2], 1, 64)], data, align=64)))
    m = g.metadata
    assert (g.version, g.alignment, g.path) == (3, 64, tmp_path / "model.gguf")
    assert m["a.u32"] == 7 and type(m["a.u32"]) is int
    assert m["a.f32"] == float(np.float32(0.1)) and type(m["a.f32"]) is float
    assert m["a.bool"] is True and m["a.str"] == "héllo" and m["a.strs"] == ["x", "", "ü"]
    assert m["a.i16s"].dtype == np.int16 and m["a.i16s"].tolist() == [-1, 0, 2]
    assert m["a.bools"].dtype == np.bool_ and m["a.bools"].tolist() == [True, False, True]
    assert m["a.nested"][0] == ["a"] and m["a.nested"][1].tolist() == [-3]
    w, h = g.tensors["w"], g.tensors["h"]
    assert (w.shape, w.kind, w.source, h.shape, h.kind) == ((2, 3), "F32", str(g.path), (2, 1, 2), "F16")
    a, b = w.read(), w.read()
    np.testing.assert_array_equal(a, W.reshape(2, 3))
    assert a.dtype == np.float32 and not a.flags.writeable and np.shares_memory(a, b)  # one map, no copy
    np.testing.assert_array_equal(h.read(), f16.astype(np.float32).reshape(2, 1, 2))
    assert h.read().dtype == np.float32


def test_no_tensors_and_version_2(tmp_path):
    g = read_gguf(write(tmp_path, gguf_bytes([u32("x", 1)], version=2)))
    assert (g.version, g.metadata, g.tensors) == (2, {"x": 1}, {})


# --- hostile files: one line naming the file and the problem --------------------------------------------------------

BIG = 2**40
HOSTILE = {  # case -> (file bytes, what the message says)
    "empty": (b"", "not a GGUF file"),
    "magic": (b"GGML" + bytes(40), "not a GGUF file"),
    "short header": (b"GGUF\x03\x00\x00\x00", "too short"),
    "version 1": (gguf_bytes(version=1), "version 1 is not supported: qkv reads versions 2, 3"),
    "version 4": (gguf_bytes(version=4), "version 4 is not supported"),
    "big-endian": (b"GGUF" + struct.pack(">IQQ", 3, 0, 0), "big-endian"),
    "tensor count": (gguf_bytes(counts=(BIG, 0)), f"declares {BIG} tensors"),
    "kv count": (gguf_bytes(counts=(0, 2**62)), f"{2**62} metadata keys"),
    "key length": (gguf_bytes([struct.pack("<Q", 2**62) + b"abc"]), "metadata key 0 runs past the end"),
    "string length": (gguf_bytes([kv("s", 8, struct.pack("<Q", BIG))]), "metadata 's' runs past the end"),
    "array count": (gguf_bytes([kv("a", 9, struct.pack("<IQ", 4, BIG))]), f"declares {BIG} items"),
    "string array count": (gguf_bytes([kv("a", 9, struct.pack("<IQ", 8, BIG))]), f"declares {BIG} items"),
    "string array item": (gguf_bytes([kv("a", 9, struct.pack("<IQ", 8, 2) + gstr("x") + struct.pack("<Q", BIG))]),
                          "(item 1) is 1099511627776 bytes, past the end"),
    "nested array count": (gguf_bytes([kv("a", 9, struct.pack("<IQ", 9, 2**60))]), "declares"),
    "nesting": (gguf_bytes([kv("a", 9, struct.pack("<IQ", 9, 1) * 12)]), "nests arrays more than 8 deep"),
    "value type": (gguf_bytes([kv("a", 13, bytes(8))]), "unknown value type 13"),
    "array item type": (gguf_bytes([kv("a", 9, struct.pack("<IQ", 13, 1))]), "array of unknown value type 13"),
    "key not UTF-8": (gguf_bytes([kv(b"\xff\xfe", 4, bytes(4))]), "metadata key 0 is not UTF-8"),
    "string not UTF-8": (gguf_bytes([kv("s", 8, gstr(b"\xc3("))]), "'s' is not UTF-8"),
    "strings not UTF-8": (gguf_bytes([kv("a", 9, struct.pack("<IQ", 8, 2) + gstr("ok") + gstr(b"\xc3"))]),
                          "'a' (item 1) is not UTF-8"),
    "duplicate key": (gguf_bytes([u32("k", 1), u32("k", 2)]), "metadata key 'k' appears twice"),
    "alignment 48": (gguf_bytes([u32("general.alignment", 48)]), "general.alignment is 48: it must be a power of two"),
    "alignment 0": (gguf_bytes([u32("general.alignment", 0)]), "general.alignment is 0"),
    "alignment str": (gguf_bytes([kv("general.alignment", 8, gstr("32"))]), "general.alignment is a str"),
    "5 dims": (gguf_bytes(infos=[info("w", [1] * 5)]), "tensor 'w' has 5 dimensions: ggml allows at most 4"),
    "zero dim": (gguf_bytes(infos=[info("w", [3, 0])]), "dimensions [3, 0]: each must be at least 1"),
    "negative dim": (gguf_bytes(infos=[info("w", [3, 2**64 - 1])]), "each must be at least 1 (and < 2^63)"),
    "overflow": (gguf_bytes(infos=[info("w", [2**32, 2**32])]), "their product overflows 64 bits"),
    "data past end": (gguf_bytes(infos=[info("w", [3, 2])], data=bytes(8)), "runs past the end of the file"),
    "offset past end": (gguf_bytes(infos=[info("w", [3, 2], offset=2**64 - 32)], data=bytes(24)), "runs past"),
    "huge tensor": (gguf_bytes(infos=[info("w", [2**20, 2**20])], data=bytes(24)), "4398046511104 bytes"),
    "misaligned": (gguf_bytes(infos=[info("w", [3, 2], offset=4)], data=bytes(64)), "offset 4, not a multiple of 32"),
    "duplicate tensor": (gguf_bytes(infos=[info("w", [8]), info("w", [8], offset=32)], data=bytes(64)),
                         "tensor 'w' appears twice"),
    "overlap": (gguf_bytes(infos=[info("a", [16]), info("b", [8], offset=32)], data=bytes(64)), "'a' and 'b' overlap"),
    "unknown type": (gguf_bytes(infos=[info("w", [256], 15)], data=bytes(512)),
                     "stored as Q8_K, which qkv cannot read: supported are F32, F16, Q4_0"),
    "IQ partial block": (gguf_bytes(infos=[info("w", [128, 2], 16)], data=bytes(256)),
                         "rows of 128 values: not a whole number of IQ2_XXS blocks (256)"),
    "IQ data past end": (gguf_bytes(infos=[info("w", [256, 2], 19)], data=bytes(96)),
                         "tensor 'w' (IQ1_S (2, 256), 100 bytes at offset"),
    "MXFP4 data past end": (gguf_bytes(infos=[info("w", [64], 39)], data=bytes(32)), "(MXFP4 (64,), 34 bytes"),
    "type id 200": (gguf_bytes(infos=[info("w", [32], 200)], data=bytes(256)), "stored as type 200"),
    "partial block": (gguf_bytes(infos=[info("w", [16, 2], 2)], data=bytes(64)), "not a whole number of Q4_0 blocks"),
    "truncated header": (VALID[:64], "metadata 'general.architecture' runs past the end"),
    "truncated tensor info": (VALID[: VALID.index(gstr("w")) + 17], "tensor 'w' runs past the end"),
    "truncated data": (VALID[:-4], "tensor 'w' (F32 (2, 3), 24 bytes at offset"),
    "name on two lines": (gguf_bytes(infos=[info("w\nx" * 40, [0])]), r"'w\nxw\nx"),
}  # fmt: skip


@pytest.mark.parametrize("case", HOSTILE)
def test_hostile_file_refused_in_one_line(case, tmp_path):
    data, message = HOSTILE[case]
    path = write(tmp_path, data)
    with pytest.raises(QkvError) as exc:
        read_gguf(path)
    text = str(exc.value)
    assert message in text and f"'{path}'" in text and "\n" not in text and len(text) < 400, text


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p.mkdir(), "is a directory"),
        (lambda p: os.mkfifo(p), "not a regular file"),
        (lambda p: None, "does not exist"),
    ],
    ids=["directory", "fifo", "missing"],
)
def test_only_regular_files(make, message, tmp_path):
    if make.__code__.co_names == ("os", "mkfifo") and not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    path = tmp_path / "model.gguf"
    make(path)
    with pytest.raises(QkvError, match=message):
        read_gguf(path)


LIMITED = """
import resource, sys
limit = 1536 * 2**20
hard = resource.getrlimit(resource.RLIMIT_AS)[1]
resource.setrlimit(resource.RLIMIT_AS, (limit, limit if hard == resource.RLIM_INFINITY else min(limit, hard)))
try:
    bytearray(2 * 2**30)
    sys.exit("the memory limit does not hold")
except MemoryError:
    pass
from qkv_cli.errors import QkvError
from qkv_cli.models.formats.gguf.reader import read_gguf
from qkv_cli.models.quants.dequantize import QUANT_TYPES
for path in sys.argv[1:]:
    try:
        read_gguf(path)
        sys.exit(f"{path} was read")
    except QkvError as exc:
        print(exc)
"""


def test_refused_before_allocating_under_a_memory_limit(tmp_path):
    pytest.importorskip("resource")
    cases = ["tensor count", "array count", "string array count", "string length", "huge tensor", "nested array count"]
    paths = [str(write(tmp_path, HOSTILE[c][0], f"{i}.gguf")) for i, c in enumerate(cases)]
    done = subprocess.run([sys.executable, "-c", LIMITED, *paths], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == len(cases) and all(HOSTILE[c][1] in line for c, line in zip(cases, lines, strict=True))


# --- gguf-py as the reference -------------------------------------------------------------------------------------


def reference_metadata(reader) -> dict:
    """GGUFReader's fields in read_gguf's conventions (nested arrays left out: GGUFReader flattens them)."""
    V = type(reader.fields["GGUF.version"].types[0])
    out = {}
    for key, field in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        if field.types[0] != V.ARRAY or field.types[-1] == V.STRING:
            out[key] = field.contents()
        elif len(field.types) == 2:
            parts = [field.parts[i] for i in field.data]
            out[key] = np.concatenate(parts) if parts else np.zeros(0, field.parts[-1].dtype)
    return out


def assert_same_metadata(mine: dict, reader):
    expected = reference_metadata(reader)
    assert expected.keys() <= mine.keys() and len(mine) == len(reader.fields) - 3
    for key, value in expected.items():
        got = mine[key]
        if isinstance(value, np.ndarray):
            assert isinstance(got, np.ndarray) and got.ndim == 1, key
            assert got.dtype == value.dtype.newbyteorder("="), key
            np.testing.assert_array_equal(got, value, err_msg=key)
        else:
            assert type(got) is type(value) and got == value, key


@pytest.mark.parametrize("missing", ["MADV_WILLNEED", "MADV_DONTNEED"])
def test_into_without_madvise_only_loses_the_hint(tmp_path, monkeypatch, missing):
    """A platform whose mmap has no madvise flag (Windows has none): into() reads the tensor all the same."""
    import mmap

    monkeypatch.delattr(mmap, missing, raising=False)
    f16 = np.array([1.5, -2, 0.25, 8, 3, -0.5], "<f2")
    g = read_gguf(write(tmp_path, gguf_bytes([], [info("h", [3, 2], 1)], f16.tobytes())))
    out = np.full((2, 3), 7, np.float32)
    assert g.tensors["h"].into(out) is out
    np.testing.assert_array_equal(out, f16.astype(np.float32).reshape(2, 3))


def assert_same_tensors(g, reader, into_every_way=False):
    """Every tensor read() and written into a float32 buffer (into) as gguf-py dequantizes it; into_every_way: also
    into a float64 buffer, and with its rows in a shuffled order."""
    gguf = sys.modules["gguf"]
    assert list(g.tensors) == [t.name for t in reader.tensors]
    rng = np.random.default_rng(5)
    for t in reader.tensors:
        mine = g.tensors[t.name]
        with np.errstate(over="ignore", invalid="ignore"):  # gguf-py warns on random blocks' inf / NaN scales
            expected = gguf.quants.dequantize(t.data, t.tensor_type)
        assert mine.kind == t.tensor_type.name and mine.shape == tuple(reversed(t.shape.tolist())), t.name
        got = mine.read()
        assert got.dtype == expected.dtype == np.float32 and got.shape == expected.shape == mine.shape, t.name
        np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32), err_msg=t.name)
        out = np.full(mine.shape, 7, np.float32)
        assert mine.into(out) is out
        np.testing.assert_array_equal(out.view(np.uint32), expected.view(np.uint32), err_msg=t.name)
        if into_every_way:
            wide = np.full(mine.shape, 7, np.float64)
            mine.into(wide)
            np.testing.assert_array_equal(wide, expected.astype(np.float64), err_msg=t.name)
            rows = expected.reshape(-1, expected.shape[-1])
            order = rng.permutation(len(rows))
            mine.into(out, order=order)
            np.testing.assert_array_equal(out.reshape(rows.shape).view(np.uint32), rows[order].view(np.uint32))


K_SCALES = {"Q2_K": (80, 82), "Q3_K": (108,), "Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}
RANDOM_KINDS = ["IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M", "IQ4_NL", "IQ4_XS", "TQ1_0",
                "TQ2_0", "MXFP4", "NVFP4"]  # any bytes: gguf-py and qkv agree bit for bit, NaN included  # fmt: skip


def write_with_gguf(gguf, path, alignment=None):
    """Metadata of every value type and tensors of every supported type, written by gguf-py."""
    V, T = gguf.GGUFValueType, gguf.GGMLQuantizationType
    w = gguf.GGUFWriter(path, "llama")
    scalars = {"UINT8": 200, "INT8": -100, "UINT16": 60000, "INT16": -30000, "UINT32": 4_000_000_000,
               "INT32": -2_000_000_000, "FLOAT32": 0.1, "UINT64": 2**64 - 1, "INT64": -(2**63), "FLOAT64": 1 / 3,
               "BOOL": True}  # fmt: skip
    for name, value in scalars.items():
        w.add_key_value(f"t.{name.lower()}", value, V[name])
        items = [value, value] if name == "BOOL" else [value, 0, value]
        w.add_key_value(f"t.array.{name.lower()}", items, V.ARRAY, sub_type=V[name])
    w.add_bool("t.false", False)
    w.add_string("t.string", "héllo ✓ <|im_start|>")
    w.add_string("t.empty", "")
    w.add_array("t.strings", ["a", "", "ü", "<|im_end|>", "Ġthe"])
    w.add_array("t.nested", [[1, 2], [3]])
    if alignment:
        w.add_custom_alignment(alignment)
    rng = np.random.default_rng(0)
    for shape in [(7,), (3, 40), (2, 3, 2, 5)]:
        w.add_tensor(f"f32.{len(shape)}d", rng.normal(0, 1, shape).astype(np.float32))
    w.add_tensor("f16", rng.normal(0, 1, (4, 33)).astype(np.float16))
    x = rng.normal(0, 1, (3, 2, 64)).astype(np.float32)
    for kind in ["BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"]:
        w.add_tensor(f"q.{kind}", gguf.quants.quantize(x, T[kind]), raw_dtype=T[kind])
    for kind, scales in K_SCALES.items():
        _, nbytes = gguf.GGML_QUANT_SIZES[T[kind]]
        raw = rng.integers(0, 256, (3, 2 * nbytes), dtype=np.uint8)  # 3 rows of 512 values
        for at in scales:
            for b in (0, nbytes):
                raw[:, b + at : b + at + 2] = rng.normal(0, 0.1, (3, 1)).astype("<f2").view(np.uint8)
        w.add_tensor(f"k.{kind}", raw, raw_dtype=T[kind])
    for kind in RANDOM_KINDS:
        block, nbytes = gguf.GGML_QUANT_SIZES[T[kind]]
        w.add_tensor(f"r.{kind}", rng.integers(0, 256, (3, 512 // block * nbytes), dtype=np.uint8), raw_dtype=T[kind])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.reference
@pytest.mark.parametrize("alignment, version", [(None, 3), (64, 3), (None, 2)])
def test_gguf_writer_file_reads_as_gguf_reads_it(alignment, version, tmp_path):
    gguf = reference_import("gguf")
    path = tmp_path / "written.gguf"
    write_with_gguf(gguf, path, alignment)
    if version != 3:  # versions 2 and 3 share the little-endian layout
        path.write_bytes(path.read_bytes()[:4] + struct.pack("<I", version) + path.read_bytes()[8:])
    g, reader = read_gguf(path), gguf.GGUFReader(path)
    assert (g.version, g.alignment) == (version, reader.alignment)
    assert_same_metadata(g.metadata, reader)
    assert g.metadata["t.nested"][0].tolist() == [1, 2] and g.metadata["t.nested"][1].tolist() == [3]
    assert g.metadata["t.nested"][0].dtype == np.int32
    assert g.metadata["t.array.float64"].dtype == np.float64 and g.metadata["t.false"] is False
    assert_same_tensors(g, reader, into_every_way=True)
    assert {t.kind for t in g.tensors.values()} == {name for name, _, _ in QUANT_TYPES.values()}


@pytest.mark.reference
def test_smollm2_file_reads_as_gguf_reads_it():
    path = smollm2_gguf()
    gguf = reference_import("gguf")
    g, reader = read_gguf(path), gguf.GGUFReader(path)
    assert (g.version, g.alignment) == (3, reader.alignment)
    assert_same_metadata(g.metadata, reader)
    assert_same_tensors(g, reader)


@pytest.mark.reference
def test_smollm2_file_conventions():
    g = read_gguf(smollm2_gguf())
    m = g.metadata
    assert len(g.tensors) == 272 and g.metadata["general.architecture"] == "llama"
    assert len(m["tokenizer.ggml.tokens"]) == 49152 and isinstance(m["tokenizer.ggml.tokens"][0], str)
    assert len(m["tokenizer.ggml.merges"]) == 48900 and m["tokenizer.ggml.token_type"].dtype == np.int32
    assert m["llama.block_count"] == 30 and type(m["llama.rope.freq_base"]) is float
    emb = g.tensors["token_embd.weight"]
    assert (emb.shape, emb.kind) == ((49152, 576), "Q8_0")
    assert g.tensors["blk.0.attn_k.weight"].shape == (192, 576)


def test_only_a_matrix_gets_its_rows_reordered_on_the_stored_blocks():
    """W^q's rows (ggml's rotary pairs) reorder on the stored blocks; a vector (a bias) and a shifted norm are
    read and copied instead (their values would move within blocks, or change)."""
    from qkv_cli.models.formats.gguf.mapping import _into
    from qkv_cli.models.formats.safetensors import Tensor

    calls = []

    def into(out, order=None):
        calls.append(order)

    matrix, vector = Tensor((4, 32), "Q8_0", None, "f", None, into), Tensor((4,), "F32", None, "f", None, into)
    _into(matrix, np.array([0, 2, 1, 3]))(None)
    assert calls[0].tolist() == [0, 2, 1, 3]
    assert _into(matrix, None) is into and _into(matrix, False) is None
    assert _into(vector, np.array([0, 2, 1, 3])) is None and _into(vector, None) is into
