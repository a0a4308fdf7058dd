"""Reading a corpus (qkv_cli.text.corpus): every format, the records it cannot read (kept with their line), and the
corpora that are not one (one QkvError). The expected records are written out by hand."""

from __future__ import annotations

import io
import json
import sys

import pytest
from scanning import require

from qkv_cli.errors import QkvError
from qkv_cli.text.corpus import MAX_RECORD_BYTES, count, records


def texts(source, **kw):
    return [(r.text_id, r.text, r.problem) for r in records(str(source), **kw)]


def test_a_text_file_is_one_text_per_line_with_its_problems(tmp_path):
    path = tmp_path / "c.txt"
    long = b"x" * (MAX_RECORD_BYTES + 10)
    path.write_bytes(b"\xef\xbb\xbfFirst line.\n\n  second\tline  \r\nbad \xff byte\n" + long + b"\nlast\n")
    got = texts(path)
    assert got == [
        (0, "First line.", None),
        (1, None, "line 2: empty"),
        (2, "second\tline", None),
        (3, None, "line 4: not UTF-8 (bad byte at offset 4)"),
        (4, None, f"line 5: longer than {MAX_RECORD_BYTES} bytes"),
        (5, "last", None),
    ]
    assert count(str(path)) == 6 and count(str(path), limit=2) == 2
    assert [t for t, _, _ in texts(path, limit=2)] == [0, 1]


def test_control_bytes_become_spaces(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes(b"a\x1b[31mred\x07 text\n")
    assert texts(path) == [(0, "a [31mred  text", None)]


def test_a_folder_is_one_text_per_txt_file_in_name_order(tmp_path):
    (tmp_path / "b.txt").write_text("Second.")
    (tmp_path / "a.txt").write_text("First.\nStill the first text.")
    (tmp_path / "c.txt").write_bytes(b"\x00\x01")
    (tmp_path / "notes.md").write_text("ignored")
    assert texts(tmp_path) == [(0, "First.\nStill the first text.", None), (1, "Second.", None),
                               (2, None, "c.txt: binary (NUL bytes)")]  # fmt: skip


def test_jsonl_reads_the_field(tmp_path):
    path = tmp_path / "c.jsonl"
    lines = [json.dumps({"text": "One.", "id": 1}), "{not json", json.dumps({"body": "x"}),
             json.dumps({"text": 3}), json.dumps({"text": "Two."})]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")
    assert texts(path) == [(0, "One.", None), (1, None, "line 2: not a JSON object"),
                           (2, None, "line 3: no string field 'text'"), (3, None, "line 4: no string field 'text'"),
                           (4, "Two.", None)]  # fmt: skip
    assert texts(path, field="body")[2] == (2, "x", None)


def test_csv_reads_the_field_with_quoted_newlines(tmp_path):
    path = tmp_path / "c.csv"
    path.write_bytes(b'id,text\n1,"Hello, world."\n2,"two\nlines"\n3,\n4,bad \xff\n5,fine\n')
    assert texts(path) == [(0, "Hello, world.", None), (1, "two\nlines", None), (2, None, "line 5: empty"),
                           (3, None, "line 6: not UTF-8 (bad byte at offset 6)"), (4, "fine", None)]  # fmt: skip
    with pytest.raises(QkvError, match="has no column 'body' \\(its columns: 'id', 'text'\\)"):
        texts(path, field="body")


def test_parquet_reads_the_field(tmp_path):
    pa = require("pyarrow")
    import pyarrow.parquet as pq

    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"text": ["One.", None, "  ", "Two."], "n": [1, 2, 3, 4]}), path)
    assert texts(path) == [(0, "One.", None), (1, None, "row 2: 'text' is not a string"), (2, None, "row 3: empty"),
                           (3, "Two.", None)]  # fmt: skip
    assert count(str(path)) == 4
    with pytest.raises(QkvError, match="has no column 'body'"):
        texts(path, field="body")
    bad = tmp_path / "bad.parquet"
    bad.write_text("not parquet")
    with pytest.raises(QkvError, match="is not a Parquet file"):
        texts(bad)


def test_stdin(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"one\n\ntwo\n")))
    assert texts("-") == [(0, "one", None), (1, None, "line 2: empty"), (2, "two", None)]


def test_the_shipped_corpus():
    got = texts("sample:corpus")
    assert len(got) >= 300 and all(p is None for _, _, p in got)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: (p / "c.bin").write_bytes(b"\x7fELF\x02\x01\x00\x00" * 100) and p / "c.bin", "looks binary"),
        (lambda p: (p / "empty").mkdir() or p / "empty", "has no .txt files"),
        (lambda p: (p / "e.txt").write_bytes(b"") or p / "e.txt", "is empty"),
        (lambda p: p / "missing.txt", "does not exist"),
    ],
    ids=["binary", "empty folder", "empty file", "missing"],
)
def test_a_corpus_that_is_not_one_is_one_error(tmp_path, make, message):
    with pytest.raises(QkvError, match=message):
        texts(make(tmp_path))
