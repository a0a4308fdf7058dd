"""The NumPy forward pass against transformers (eager attention): MiniLM, and small random GPT-2 / BERT models.

Float32 must match to 1e-5, float64 (the torch model run with .double()) to 1e-10: every layer's attention
weights, every hidden state and last_hidden_state. transformers is imported once per module.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from helpers import minilm_dir, reference_import

from qkv_cli.errors import QkvError
from qkv_cli.models import load_model

pytestmark = pytest.mark.reference

TOL = {"float32": 1e-5, "float64": 1e-10}
SENTENCES = [
    "The cat sat on the mat.",
    "Attention is all you need, or so they say!",
    "a",
    "Paris is the capital of France; Berlin is the capital of Germany. Ünïcödé wörds and emoji 🙂 too.",
    " ".join(
        "In the beginning the model reads every token, compares each query with every key, weighs the values "
        "and passes the result through a small feed-forward network, again and again, layer after layer.".split()
        * 3
    ),  # well over 100 tokens
]


@pytest.fixture(scope="module")
def hf():
    torch = reference_import("torch")
    transformers = reference_import("transformers")
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # torch's spinning OpenMP threads and NumPy's BLAS threads would fight over the cores
    yield torch, transformers
    torch.set_num_threads(threads)


def both_dtypes(model):
    """The transformers model in float32 and a float64 copy (the same weights, exactly)."""
    import copy

    return {"float32": model.eval(), "float64": copy.deepcopy(model).double().eval()}


def torch_run(torch, model, ids):
    with torch.no_grad():
        out = model(torch.tensor([list(ids)]), output_attentions=True, output_hidden_states=True)
    attentions = np.stack([a[0].numpy() for a in out.attentions])
    hidden = np.stack([h[0].numpy() for h in out.hidden_states])
    return attentions, hidden, out.last_hidden_state[0].numpy()


def assert_matches(torch, refs, ours, text, dtype):
    result = ours[dtype].run(text, layers="all")
    attentions, hidden, last = torch_run(torch, refs[dtype], result.ids)
    tol = TOL[dtype]
    assert result.attentions.dtype == np.dtype(dtype)
    np.testing.assert_allclose(result.attentions, attentions, atol=tol, rtol=0)
    np.testing.assert_allclose(result.hidden_states, hidden, atol=tol, rtol=tol)
    np.testing.assert_allclose(result.last_hidden_state, last, atol=tol, rtol=tol)
    return result


@pytest.fixture(scope="module")
def minilm_models(hf):
    _, transformers = hf
    folder = minilm_dir()
    ref = transformers.BertModel.from_pretrained(str(folder), attn_implementation="eager")
    return both_dtypes(ref), {dt: load_model(folder, dtype=dt) for dt in TOL}


@pytest.mark.parametrize("dtype", list(TOL))
@pytest.mark.parametrize("text", SENTENCES, ids=lambda t: t[:16])
def test_minilm_matches_transformers(torch, transformers, minilm, minilm_models, dtype, text):
    refs, ours = minilm_models
    result = assert_matches(torch, refs, ours, text, dtype)
    assert result.labels[0] == "[CLS]" and result.labels[-1] == "[SEP]"


def test_minilm_long_sentence_is_long(minilm, minilm_models):
    _, ours = minilm_models
    assert len(ours["float32"].tokenize(SENTENCES[-1])) > 100


def test_minilm_layer_inputs_are_transformers_hidden_states(torch, minilm, minilm_models):
    refs, ours = minilm_models
    result = ours["float64"].run(SENTENCES[1], layers="all")
    _, hidden, _ = torch_run(torch, refs["float64"], result.ids)
    for l, det in result.layers.items():
        np.testing.assert_allclose(det.H, hidden[l], atol=1e-10)


def test_minilm_refuses_more_than_512_tokens(minilm, minilm_models):
    _, ours = minilm_models
    with pytest.raises(QkvError, match=r"has 602 tokens but .* at most 512 \(max_position_embeddings\)"):
        ours["float32"].run("word " * 600)


@pytest.mark.parametrize("dtype", list(TOL))
def test_minilm_loop_kernel_gives_the_same_numbers(minilm, minilm_models, dtype):
    _, ours = minilm_models
    a = ours[dtype].run(SENTENCES[0], layers="all")
    b = ours[dtype].run(SENTENCES[0], layers="all", kernel="loop")
    tol = 1e-6 if dtype == "float32" else 1e-13
    np.testing.assert_allclose(b.attentions, a.attentions, atol=tol)
    np.testing.assert_allclose(b.last_hidden_state, a.last_hidden_state, atol=tol * 10)
    for l in a.layers:
        np.testing.assert_allclose(b.layers[l].heads, a.layers[l].heads, atol=tol * 10)


# --- small random GPT-2 and BERT checkpoints saved by transformers ---------------------------------------


def randomize(torch, model, seed):
    """Replace the tiny default init (std 0.02, LN = 1/0) with larger values so that attention is far from uniform."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=p.dtype)
            if ("ln_" in name or "LayerNorm" in name) and name.endswith("weight"):
                p.copy_(1 + 0.2 * noise)
            else:
                p.copy_(0.15 * noise)
    return model


@pytest.fixture(scope="module")
def tokenizer_json(tmp_path_factory):
    from qkv_cli.text.tokens import BPE_PATH

    path = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    shutil.copy(BPE_PATH, path)
    from tokenizers import Tokenizer

    return path, Tokenizer.from_file(str(path)).get_vocab_size()


GPT2_VARIANTS = {
    "gpt2-gelu_new": ("GPT2Model", {}),
    "lm-head-prefix": ("GPT2LMHeadModel", {}),
    "gelu-exact-scaled-by-layer": (
        "GPT2Model",
        {"activation_function": "gelu", "scale_attn_by_inverse_layer_idx": True},
    ),
}


@pytest.fixture(scope="module", params=list(GPT2_VARIANTS))
def gpt2_pair(request, hf, tokenizer_json, tmp_path_factory):
    torch, transformers = hf
    cls_name, extra = GPT2_VARIANTS[request.param]
    tok_path, vocab = tokenizer_json
    config = transformers.GPT2Config(vocab_size=vocab, n_positions=160, n_embd=48, n_layer=3, n_head=4, **extra)
    torch.manual_seed(1)
    model = randomize(torch, getattr(transformers, cls_name)(config), seed=2).eval()
    folder = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(folder, safe_serialization=True)
    shutil.copy(tok_path, folder / "tokenizer.json")
    ref = transformers.GPT2Model.from_pretrained(folder, attn_implementation="eager")
    return both_dtypes(ref), {dt: load_model(folder, dtype=dt) for dt in TOL}


@pytest.mark.parametrize("dtype", list(TOL))
@pytest.mark.parametrize("text", SENTENCES[:2] + SENTENCES[-1:], ids=lambda t: t[:16])
def test_gpt2_matches_transformers(torch, transformers, gpt2_pair, dtype, text):
    refs, ours = gpt2_pair
    result = assert_matches(torch, refs, ours, text, dtype)
    m = result.attentions.shape[-1]
    assert np.all(result.attentions[..., np.triu(np.ones((m, m), bool), 1)] == 0)
    assert result.attentions[:, :, m // 2 :].max() > 0.5  # far from uniform: the comparison means something


def test_gpt2_loop_kernel(gpt2_pair):
    _, ours = gpt2_pair
    a = ours["float64"].run(SENTENCES[0], layers="all")
    b = ours["float64"].run(SENTENCES[0], layers="all", kernel="loop")
    np.testing.assert_allclose(b.attentions, a.attentions, atol=1e-13)
    np.testing.assert_allclose(b.last_hidden_state, a.last_hidden_state, atol=1e-12)


@pytest.fixture(scope="module")
def bert_pair(hf, tokenizer_json, tmp_path_factory):
    """A random BertForMaskedLM: keys carry the 'bert.' prefix and the file holds the MLM head too."""
    torch, transformers = hf
    tok_path, vocab = tokenizer_json
    config = transformers.BertConfig(
        vocab_size=vocab,
        hidden_size=48,
        num_hidden_layers=2,
        num_attention_heads=6,
        intermediate_size=96,
        max_position_embeddings=160,
    )
    torch.manual_seed(3)
    model = randomize(torch, transformers.BertForMaskedLM(config), seed=4).eval()
    folder = tmp_path_factory.mktemp("bert-mlm")
    model.save_pretrained(folder, safe_serialization=True)
    shutil.copy(tok_path, folder / "tokenizer.json")
    ref = transformers.BertModel.from_pretrained(folder, attn_implementation="eager")
    return both_dtypes(ref), {dt: load_model(folder, dtype=dt) for dt in TOL}


@pytest.mark.parametrize("dtype", list(TOL))
def test_prefixed_bert_matches_transformers(torch, transformers, bert_pair, dtype):
    refs, ours = bert_pair
    result = assert_matches(torch, refs, ours, SENTENCES[3], dtype)
    assert result.attentions.max() > 0.5
