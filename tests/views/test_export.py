"""The JSON writer: the text of json.dumps, with -inf and NaN as null, written in pieces."""

from __future__ import annotations

import io
import json

import numpy as np

from qkv_cli.views import export


def test_json_written_in_pieces_is_json_dumps_with_nulls():
    rng = np.random.default_rng(1)
    w = rng.random((3, 2, 50, 50))
    masked = np.where(np.triu(np.ones((50, 50), dtype=bool), 1), -np.inf, w)  # 15,000 numbers: one piece
    big = rng.random((70, 1000))  # more than one piece: row by row
    big[3, 7], big[50, 0] = -np.inf, np.nan
    doc = {"w": w, "masked": masked, "big": big, "nan": np.array([1.5, np.nan, np.inf]), "ids": np.arange(4),
           "scalar": np.float64(0.25), "empty": np.zeros((0, 3)), "name": "a",
           "nested": [{"x": np.float64(2.0)}, [1, 2]]}  # fmt: skip
    out = io.StringIO()
    export.write_json(doc, out)

    def nulls(a):
        return np.where(np.isfinite(a), a, None).tolist()

    plain = dict(doc, w=w.tolist(), masked=nulls(masked), big=nulls(big), nan=[1.5, None, None],
                 ids=[0.0, 1.0, 2.0, 3.0], scalar=0.25, empty=[], nested=[{"x": 2.0}, [1, 2]])  # fmt: skip
    assert out.getvalue() == json.dumps(plain)
