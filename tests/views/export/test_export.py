"""The JSON writer: the text of json.dumps, with -inf and NaN as null, written in pieces."""

from __future__ import annotations

import io
import json

import numpy as np

from qkv_cli.views.export import results as export


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


def test_model_json_carries_the_npz_names_of_a_decoder(tmp_path):
    """A tiny Qwen 2 (q, k, v biases, G=2 of tau=4, sliding and full layers): the JSON holds what the NPZ holds,
    under the same names: biases, Q/K before RoPE, kv_heads, head_dim, layer_types, attentions."""
    from safetensors.numpy import load_file
    from tiny import TINY, make_checkpoint
    from typer.testing import CliRunner

    from qkv_cli.cli import app

    folder = make_checkpoint(tmp_path / "qwen2", "qwen2")
    npz_path = tmp_path / "run.npz"
    args = ["run", "the cat sat on the mat", "--model", str(folder), "--format", "json", "--show", "q,k,v,output",
            "--save-npz", str(npz_path)]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    with np.load(npz_path, allow_pickle=False) as z:
        npz = {k: z[k] for k in z.files}
    tau, G, dk = TINY["tau"], 2, TINY["d"] // TINY["tau"]
    assert (doc["kv_heads"], doc["head_dim"]) == (int(npz["kv_heads"]), int(npz["head_dim"])) == (G, dk)
    assert doc["layer_types"] == list(npz["layer_types"]) == ["sliding_attention", "full_attention"]
    np.testing.assert_allclose(doc["attentions"], npz["attentions"], atol=1e-12)
    np.testing.assert_allclose(doc["last_hidden_state"], npz["last_hidden_state"], atol=1e-12)
    assert doc["ids"] == npz["ids"].tolist() and npz["ids"].dtype == np.int64 and len(doc["ids"]) == 6
    layer = doc["layers"][str(int(npz["layer"]))]  # the NPZ's detail: the first chosen layer
    for name in ("bq", "bk", "bv", "Q_pre_rope", "K_pre_rope", "Q", "K", "V", "output"):
        np.testing.assert_allclose(layer[name], npz[name], atol=1e-12, err_msg=name)
    assert "bo" not in layer and "bo" not in npz  # Qwen 2 has no bias on W^o
    weights = load_file(str(folder / "model.safetensors"))  # the biases as the checkpoint stores them
    prefix = f"layers.{int(npz['layer'])}.self_attn."  # make_checkpoint writes no "model." prefix
    np.testing.assert_allclose(layer["bq"], weights[prefix + "q_proj.bias"].reshape(tau, dk), atol=1e-6)
    np.testing.assert_allclose(layer["bk"], weights[prefix + "k_proj.bias"].reshape(G, dk), atol=1e-6)
    np.testing.assert_allclose(layer["bv"], weights[prefix + "v_proj.bias"].reshape(G, dk), atol=1e-6)
    one_head = CliRunner().invoke(app, [*args[:-2], "--head", "3"])  # bq, like Q and Q_pre_rope: the heads shown
    assert np.array(json.loads(one_head.stdout)["layers"]["1"]["bq"]).shape == (1, dk)


def test_csv_text_is_what_csv_writer_writes():
    """The CSV text qkv makes without the csv module equals csv.writer's rows of the same values: labels quoted
    when they hold a comma, a quote or a line break, -inf spelled out, every value as repr(float)."""
    import csv
    from types import SimpleNamespace

    labels = ["a,b", 'say "hi"', "line\nbreak", " lead", "plain", "c\rr"]
    n, tau, d = len(labels), 2, 3
    rng = np.random.default_rng(4)
    weights = rng.random((tau, n, n)).astype(np.float32)
    weights[0, 0, 1:] = -np.inf
    weights[1, 2, 3] = np.nan
    r = SimpleNamespace(
        labels=labels, key_labels=labels, tau=tau, weights=weights, Q=rng.random((tau, n, d)), sinks=None
    )
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for key in ("Q", "weights"):
        for head in range(tau):
            for i in range(n):
                for c in range(getattr(r, key).shape[2]):
                    v = float(getattr(r, key)[head, i, c])
                    writer.writerow([7, key, head, i, c, labels[i], labels[c] if key == "weights" else "",
                                     "-inf" if v == -np.inf else repr(v)])  # fmt: skip
    got = "".join(export.csv_text(r, ["q", "weights"], range(tau), (7,)))
    assert got == buf.getvalue()
    assert got.startswith('7,Q,0,0,0,"a,b",,') and ',"say ""hi""",' in got
