"""gpt-oss against transformers, on a tiny random model it built and saved (tests/support/decoders.py, case "gpt_oss"):
the sinks' share of every row, the router's choices, the layer types and the bad keys. Attention to 1e-5 / 1e-10
and greedy generation are in test_decoders_reference.py and test_generate_reference.py with every family."""

from __future__ import annotations

import json

import numpy as np
import pytest
from decoders import build, float64_everywhere, float64_twin
from typer.testing import CliRunner

from qkv_cli.cli import app
from qkv_cli.models import load_model

pytestmark = pytest.mark.reference
IDS = [int(i) for i in np.random.default_rng(3).integers(3, 1400, 17)]  # longer than the window (5)


@pytest.fixture(scope="module")
def gpt_oss(tmp_path_factory):
    from helpers import reference_import

    torch, transformers = reference_import("torch"), reference_import("transformers")
    folder = tmp_path_factory.mktemp("gpt_oss")
    return folder, build(transformers, torch, "gpt_oss", folder)


def sink_shares(torch, model, ids):
    """transformers' own sink column, per layer (tau, m): its eager attention's inputs recorded, then
    softmax(cat([Q K^T * scaling + mask, sinks]))[..., -1] from its `sinks` parameter, as its code computes it."""
    from transformers.models.gpt_oss import modeling_gpt_oss as mod

    shares, plain = [], mod.eager_attention_forward

    def recording(module, query, key, value, attention_mask, scaling, **kw):
        K = mod.repeat_kv(key, module.num_key_value_groups)
        S = query @ K.transpose(2, 3) * scaling
        if attention_mask is not None:
            S = S + attention_mask
        sinks = module.sinks.reshape(1, -1, 1, 1).expand(S.shape[0], -1, S.shape[2], 1)
        combined = torch.cat([S, sinks], dim=-1)
        shares.append(torch.softmax(combined - combined.amax(-1, keepdim=True), dim=-1)[0, ..., -1].numpy())
        return plain(module, query, key, value, attention_mask, scaling, **kw)

    mod.eager_attention_forward = recording
    try:
        with torch.no_grad():
            out = model(torch.tensor([ids]), output_attentions=True)
    finally:
        mod.eager_attention_forward = plain
    return np.stack(shares), np.stack([a[0].numpy() for a in out.attentions])


def test_rows_miss_the_sinks_share_float32(gpt_oss, torch):
    folder, model = gpt_oss
    want, weights = sink_shares(torch, model, IDS)
    np.testing.assert_allclose(1 - weights.sum(-1), want, atol=1e-5)  # transformers' rows drop the sink column
    run = load_model(folder, dtype="float32").forward(IDS)
    assert run.sinks.shape == run.attentions.shape[:-1] == (3, 4, 17)
    np.testing.assert_allclose(run.sinks, want, atol=1e-5)
    np.testing.assert_allclose(run.attentions, weights, atol=1e-5)
    assert want.max() > 0.5 and want.min() < 0.2  # the sinks matter, and differ by head


def test_rows_miss_the_sinks_share_float64(gpt_oss, torch, transformers):
    folder, model = gpt_oss
    with float64_everywhere(torch):
        want, weights = sink_shares(torch, float64_twin(transformers, torch, model), IDS)
    run = load_model(folder, dtype="float64").forward(IDS, layers=[1])
    np.testing.assert_allclose(run.sinks, want, atol=1e-10, rtol=0)
    np.testing.assert_allclose(run.attentions, weights, atol=1e-10, rtol=0)
    layer = run.layers[1]
    np.testing.assert_allclose(layer.sinks, want[1], atol=1e-10)
    np.testing.assert_array_equal(layer.sink_logits, model.model.layers[1].self_attn.sinks.detach().double().numpy())


@pytest.mark.parametrize("kernel", ["loop", "reference"])
def test_every_kernel_gives_the_same_sinks(gpt_oss, kernel):
    ours = load_model(gpt_oss[0], dtype="float64")
    a, b = ours.forward(IDS), ours.forward(IDS, kernel=kernel)
    np.testing.assert_allclose(b.attentions, a.attentions, atol=1e-13)
    np.testing.assert_allclose(b.sinks, a.sinks, atol=1e-13)


def test_router_chooses_as_transformers(gpt_oss, torch):
    """On transformers' own MLP input of each layer, the k experts chosen (in order) and their weights equal its
    router's, and the tokens do not all choose alike."""
    from qkv_cli.models.layers.moe import route

    folder, model = gpt_oss
    ours = load_model(folder, dtype="float32")
    seen = []
    handles = [layer.mlp.router.register_forward_hook(lambda m, args, out: seen.append((args[0], out)))
               for layer in model.model.layers]  # fmt: skip
    with torch.no_grad():
        model(torch.tensor([IDS]))
    for h in handles:
        h.remove()
    for l, (x, (_, scores, indices)) in enumerate(seen):
        blk = ours.params.blocks[l]
        top, g = route(blk.moe.router(x.numpy()), ours.config.mlp.moe)
        np.testing.assert_array_equal(top, indices.numpy())
        np.testing.assert_allclose(g, scores.numpy(), atol=1e-6)
        assert len({tuple(sorted(t)) for t in top}) > 1


def test_config_layers_rope_and_experts(gpt_oss):
    folder, model = gpt_oss
    c = load_model(folder).config
    assert c.attention.sinks and c.attention.qkv_bias and c.attention.o_bias
    assert c.attention.layer_types == tuple(model.config.layer_types) == ("sliding_attention", "full_attention",
                                                                          "sliding_attention")  # fmt: skip
    r = c.rope.of("", 0)
    assert (r.kind, r.truncate, r.factor, r.original_max_positions) == ("yarn", False, 4.0, 16)
    assert (c.mlp.moe.experts, c.mlp.moe.top_k, c.mlp.moe.router, c.mlp.swiglu) == (4, 2, "topk_softmax", (1.702, 1.5))
    r = CliRunner().invoke(app, ["shapes", "--model", str(folder), "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["total_parameters"] == doc["file_parameters"] == sum(p.numel() for p in model.parameters())
    assert (doc["sinks"], doc["experts"], doc["top_k"]) == (True, 4, 2)


@pytest.mark.parametrize(
    "changes,fragment",
    [
        ({"num_experts_per_tok": 5}, "the experts chosen per token (5) cannot exceed the experts (4)"),
        ({"num_local_experts": 0}, "experts must be a whole number of at least 1, got 0"),
        ({"swiglu_limit": -1.0}, "'swiglu_limit' must be a positive number"),
        ({"swiglu_alpha": "big"}, "'swiglu_alpha' must be a number"),
        ({"layer_types": ["sliding_attention"]}, "'layer_types' must list"),
    ],
)  # fmt: skip
def test_bad_keys_are_one_line_exit_2_before_weights(changes, fragment, gpt_oss, tmp_path):
    folder, _ = gpt_oss
    raw = json.loads((folder / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(raw | changes))
    (tmp_path / "model.safetensors").write_bytes(b"not read")
    (tmp_path / "tokenizer.json").write_text((folder / "tokenizer.json").read_text())
    r = CliRunner().invoke(app, ["run", "a b c", "--model", str(tmp_path)])
    assert r.exit_code == 2 and fragment in r.output and r.output.count("\n") == 1, r.output


def test_a_sinks_tensor_of_the_wrong_shape_is_one_line_exit_2(gpt_oss, tmp_path):
    from safetensors.numpy import load_file, save_file

    folder, _ = gpt_oss
    tensors = load_file(folder / "model.safetensors")
    tensors["model.layers.1.self_attn.sinks"] = np.zeros(5, dtype=np.float32)  # 4 heads
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    for name in ("config.json", "tokenizer.json"):
        (tmp_path / name).write_text((folder / name).read_text())
    r = CliRunner().invoke(app, ["run", "a b c", "--model", str(tmp_path)])
    assert r.exit_code == 2 and "sinks" in r.output and r.output.count("\n") == 1, r.output


def test_run_table_shows_the_sink_column_and_share(gpt_oss):
    folder, _ = gpt_oss
    args = ["run", "the cat sat on the mat", "--model", str(folder), "--layer", "0", "--head", "1"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert "alpha = Softmax([scores + Mask, s_1]) without its last column, head 1; sink = 1 - row sum" in r.output
    header = next(line for line in lines if line.split()[:1] == ["sink"])
    assert header.split()[1:3] == ["the", "cat"]  # the sink's share first, then the keys
    run = load_model(folder).run("the cat sat on the mat", layers=[0])
    first = next(line for line in lines if line.startswith(" the ") or line.startswith("the "))
    assert first.split()[1] == f"{run.sinks[0, 1, 0]:.2f}"
    assert "sink share" in r.output and f"{run.sinks[0, 1].mean():.3f}" in r.output


def test_json_and_npz_export_sinks(gpt_oss, torch, tmp_path):
    folder, model = gpt_oss
    text = "the cat sat on the mat because it was warm"
    common = ["run", text, "--model", str(folder), "--layer", "2", "--dtype", "float32"]
    r = CliRunner().invoke(app, [*common, "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    ids = load_model(folder).tokenize(text).ids
    want, _ = sink_shares(torch, model, list(ids))
    sinks = np.array(doc["sinks"])
    assert sinks.shape == (3, 4, len(ids))
    np.testing.assert_allclose(sinks, want, atol=1e-5)
    r = CliRunner().invoke(app, [*common, "--save-npz", str(tmp_path / "run.npz")])
    assert r.exit_code == 0, r.output
    z = np.load(tmp_path / "run.npz")
    np.testing.assert_allclose(z["sinks"], sinks, atol=1e-7)
    np.testing.assert_allclose(z["sink_logits"], model.model.layers[2].self_attn.sinks.detach().numpy())


def test_csv_rows_and_a_generations_npz_hold_the_sinks_share(gpt_oss, torch, tmp_path):
    """The CSV's rows of matrix "sink" and a generation's step_sinks: transformers' own sink column."""
    folder, model = gpt_oss
    text = "the cat sat on the mat because it was warm"
    ids = list(load_model(folder).tokenize(text).ids)
    want, _ = sink_shares(torch, model, ids)
    r = CliRunner().invoke(app, ["run", text, "--model", str(folder), "--layer", "2", "--format", "csv"])
    assert r.exit_code == 0, r.output
    rows = [line.split(",") for line in r.stdout.splitlines()[1:] if line.split(",")[1] == "sink"]
    got = np.zeros((4, len(ids)))
    for layer, _, head, query, _, _, _, value in rows:
        assert layer == "2"
        got[int(head), int(query)] = float(value)
    np.testing.assert_allclose(got, want[2], atol=1e-5)
    npz = tmp_path / "gen.npz"
    r = CliRunner().invoke(app, ["generate", text, "--model", str(folder), "--max-new-tokens", "3", "--save-npz", npz])
    assert r.exit_code == 0, r.output
    z = np.load(npz)
    P, written = int(z["prompt_len"]), [int(i) for i in z["ids"]]
    full, _ = sink_shares(torch, model, written[:-1])  # (L, tau, n): the row of position P + t - 1 wrote token t
    np.testing.assert_allclose(z["step_sinks"], full[:, :, P - 1 :].transpose(2, 0, 1), atol=1e-5)


def test_heatmaps_draw_the_sink_column(gpt_oss, monkeypatch):
    """A layer's heatmap and the model view: each panel's first column is the rows' sink share, labelled 'sink'."""
    from qkv_cli.views.figures import heatmaps as figures
    from qkv_cli.views.kinds import heatmap_figure

    folder, _ = gpt_oss
    run = load_model(folder).run("the cat sat on the mat", layers=[1])
    drawn = {}
    grid, view = figures.draw_grid, figures.draw_model_view

    def seen_grid(panels, rows, cols, *a, **k):
        drawn["grid"] = (panels, cols, a[1])  # a: title, subtitle, ...
        return grid(panels, rows, cols, *a, **k)

    def seen_view(tiles, *a, **k):
        drawn["view"] = tiles
        return view(tiles, *a, **k)

    monkeypatch.setattr(figures, "draw_grid", seen_grid)
    monkeypatch.setattr(figures, "draw_model_view", seen_view)
    heatmap_figure(run.layers[1], [0, 2])
    panels, cols, subtitle = drawn["grid"]
    assert cols[0] == "sink" and cols[1:] == run.labels and "column 'sink'" in subtitle
    for (_, grid_, _), j in zip(panels, [0, 2], strict=True):
        np.testing.assert_array_equal(grid_[:, 0], run.sinks[1, j])
        np.testing.assert_array_equal(grid_[:, 1:], run.attentions[1, j])
    heatmap_figure(run, [0, 1, 2, 3])
    np.testing.assert_array_equal(drawn["view"][..., 0], run.sinks)


def test_heads_shows_each_heads_sink_share(gpt_oss):
    folder, _ = gpt_oss
    text = "the cat sat on the mat"
    r = CliRunner().invoke(app, ["heads", text, "--model", str(folder), "--format", "json"])
    assert r.exit_code == 0, r.output
    run = load_model(folder).run(text)
    heads = json.loads(r.stdout)["heads"]
    np.testing.assert_allclose([h["sink_share"] for h in heads], run.sinks.mean(-1).ravel(), atol=1e-6)
    r = CliRunner().invoke(app, ["heads", text, "--model", str(folder)])
    assert r.exit_code == 0 and "sink share" in r.output and f"{run.sinks[2, 1].mean():.3f}" in r.output, r.output
    r = CliRunner().invoke(app, ["heads", text, "--model", str(folder), "--format", "csv"])
    assert r.exit_code == 0 and "sink_share" in r.output.splitlines()[0]


def test_explain_puts_the_sink_in_the_softmax(gpt_oss):
    """explain's plain recomputation includes the sink: its weights are the run's, and the zoomed row's sum
    includes exp(s_j - max), whose share is the run's missing mass."""
    folder, _ = gpt_oss
    text = "the cat sat on the mat because it was warm"
    common = [text, "--model", str(folder), "--layer", "1", "--head", "2", "--dtype", "float64", "--format", "json"]
    r = CliRunner().invoke(app, ["explain", *common, "--query", "4"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    run = load_model(folder, dtype="float64").run(text, layers=[1])
    np.testing.assert_allclose(doc["steps"]["weights"]["matrix"], run.attentions[1, 2], atol=1e-9)
    assert "Softmax([S + Mask, s_2])" in doc["steps"]["weights"]["formula"]
    np.testing.assert_allclose(doc["query"]["sink_share"], run.sinks[1, 2, 4], atol=1e-9)
    np.testing.assert_allclose(doc["query"]["weights"], run.attentions[1, 2, 4], atol=1e-9)
    r = CliRunner().invoke(app, ["explain", *common[:-2], "--query", "4"])
    assert r.exit_code == 0 and f"the sink's share exp(s_2 - max) / sum = {run.sinks[1, 2, 4]:.4f}" in " ".join(
        r.output.split()), r.output  # fmt: skip
