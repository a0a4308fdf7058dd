"""qkv patch on a BERT masked LM against the same patches made with forward hooks on transformers' BertForMaskedLM
(eager attention, float64), with MiniLM's WordPiece vocabulary so the prompts hold a real [MASK].

The reference is written here, on the Hugging Face modules of layer l (model.bert.encoder.layer[l]): the layer's
output for resid, attention.output.dense's output for attn (before the residual and LayerNorm), output.dense's
output for mlp, attention.output.dense's input (head j's d_k columns) for heads, attention.self.query / key /
value's output (head j's columns) for q / k / v, and for pattern that input with head j's columns recomputed in torch
as alpha_j(clean) V_j from the run's own value output. Each patch is one more transformers forward; the metric is
read from its masked-LM logits at the answer position. Prompts of two lengths: each pair (s, t) copies the clean
run's position s into the corrupted run's position t (the pairs given by qkv_cli's pairing are checked first to be
the common start and end, written out by hand).
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from helpers import minilm_dir, reference_import
from torch_hooks import hooked, keeper, pattern_hooks

from qkv_cli.errors import QkvError
from qkv_cli.models import load_model
from qkv_cli.pipeline.patch.engine import patch

pytestmark = pytest.mark.reference
CLEAN, CORRUPTED = "The capital of France is [MASK].", "The capital of Italy is [MASK]."
LONGER = "The capital of the United Kingdom is [MASK]."  # [CLS] the capital of | the united kingdom | is [MASK] . [SEP]
EVERY = ("resid", "attn", "mlp", "heads", "q", "k", "v", "pattern")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A tiny random BertForMaskedLM (3 layers, 4 heads, d 32) on MiniLM's vocabulary, weights N(0, 0.3) so that
    attention is peaked, saved as transformers saves it (the decoder tied to the word embeddings)."""
    torch, transformers = reference_import("torch"), reference_import("transformers")
    vocab = minilm_dir() / "tokenizer.json"
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                                  intermediate_size=64, max_position_embeddings=64)  # fmt: skip
    model = transformers.BertForMaskedLM(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * 0.3 + (1.0 if name.endswith("LayerNorm.weight") else 0.0))
    folder = tmp_path_factory.mktemp("bert-mlm")
    model.eval().save_pretrained(folder, safe_serialization=True)
    shutil.copy(vocab, folder / "tokenizer.json")
    ref = transformers.BertForMaskedLM.from_pretrained(folder, attn_implementation="eager").double().eval()
    return torch, load_model(folder, dtype="float64"), ref


class Hooked:
    """BertForMaskedLM with one patch at a time made by forward hooks, and the clean run's activations."""

    def __init__(self, torch, model):
        self.torch, self.model = torch, model
        self.layers = model.bert.encoder.layer
        self.dk = model.config.hidden_size // model.config.num_attention_heads

    def modules(self, l):
        layer = self.layers[l]
        att = layer.attention
        return {"q": att.self.query, "k": att.self.key, "v": att.self.value, "attn": att.output.dense,
                "mlp": layer.output.dense, "resid": layer}  # fmt: skip

    def forward(self, ids, hooks=(), attentions=False):
        with hooked(hooks), self.torch.no_grad():
            return self.model(self.torch.tensor([ids]), output_attentions=attentions)

    def capture(self, ids):
        seen = {}
        keep = keeper(seen)

        hooks = []
        for l in range(len(self.layers)):
            mods = self.modules(l)
            hooks += [
                (mods["resid"], "post", keep(("resid", l))),
                (mods["attn"], "post", keep(("attn", l))),
                (mods["mlp"], "post", keep(("mlp", l))),
                (mods["attn"], "pre", keep(("heads", l), pre=True)),
            ]
            hooks += [(mods[x], "post", keep((x, l))) for x in "qkv"]  # fmt: skip
        out = self.forward(ids, hooks, attentions=True)
        for l in range(len(self.layers)):
            seen[("alpha", l)] = out.attentions[l][0].clone()
        return seen

    def patched(self, ids, clean, what, l, i, pairs, at):  # -> masked-LM logits [V] at position `at`
        mods, dk = self.modules(l), self.dk
        s, t = (list(x) for x in zip(*pairs, strict=True))
        cols = slice(i * dk, (i + 1) * dk)

        def replace_out(module, args, out):
            first = (out[0] if isinstance(out, tuple) else out).clone()
            if what in ("resid", "attn", "mlp"):
                first[0, t[i]] = clean[(what, l)][0, s[i]]
            else:  # q, k, v: head i's columns at every pair
                first[0, t, cols] = clean[(what, l)][0, s, cols]
            return (first, *out[1:]) if isinstance(out, tuple) else first

        if what in ("resid", "attn", "mlp", "q", "k", "v"):
            hooks = [(mods[what], "post", replace_out)]
        elif what == "heads":

            def heads(module, args):
                z = args[0].clone()
                z[0, t, cols] = clean[("heads", l)][0, s, cols]
                return (z, *args[1:])

            hooks = [(mods["attn"], "pre", heads)]
        else:  # pattern: z_i = alpha_i(clean) V_i, V of this run (value's output)
            hooks = pattern_hooks(mods["v"], mods["attn"], clean[("alpha", l)][i], cols)
        return self.forward(ids, hooks).logits[0, at].numpy()


def reference_recovery(hooked, ids_c, ids_x, at, answer, wrong, what, shape, pairs) -> np.ndarray:
    def metric(z):
        return float(z[answer] - z[wrong])

    clean = hooked.capture(ids_c)
    m_c = metric(hooked.forward(ids_c).logits[0, at[0]].numpy())
    m_x = metric(hooked.forward(ids_x).logits[0, at[1]].numpy())
    got = np.array([[metric(hooked.patched(ids_x, clean, what, l, i, pairs, at[1])) for i in range(shape[1])]
                    for l in range(shape[0])])  # fmt: skip
    return (got - m_x) / (m_c - m_x)


def check(built, corrupted, whats, pairs_by_hand=None):
    torch, ours, ref = built
    result = patch(ours, CLEAN, corrupted, "paris", "rome", what=whats)
    ids_c, ids_x = list(ours.tokenize(CLEAN).ids), list(ours.tokenize(corrupted).ids)
    pairs = result.paired()
    if pairs_by_hand is not None:
        assert pairs == pairs_by_hand
    hooked = Hooked(torch, ref)
    for what in whats:
        got = result.recovery[what]
        want = reference_recovery(hooked, ids_c, ids_x, result.answer_position, result.answer[0], result.wrong[0],
                                  what, got.shape, pairs)  # fmt: skip
        assert np.isfinite(want).all() and np.abs(want).max() > 1e-3, what  # the patches move the answer
        np.testing.assert_allclose(got, want, atol=1e-8, rtol=0, err_msg=what)
    return result


def test_the_masked_lm_head_equals_transformers_logits(built):
    torch, ours, ref = built
    ids = list(ours.tokenize(CLEAN).ids)
    x = ours.forward(ids).last_hidden_state
    with torch.no_grad():
        want = ref(torch.tensor([ids])).logits[0].numpy()
    np.testing.assert_allclose(ours.family.masked_lm(ours.params, ours.config, x), want, atol=1e-10, rtol=0)


def test_an_untied_head_reads_its_own_decoder_matrix(tmp_path):
    """tie_word_embeddings false: the checkpoint stores cls.predictions.decoder.weight apart from E, and the scores
    are read with it (with E they would differ)."""
    torch, transformers = reference_import("torch"), reference_import("transformers")
    torch.manual_seed(1)
    cfg = transformers.BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                  intermediate_size=64, max_position_embeddings=64)  # fmt: skip
    cfg.tie_word_embeddings = False
    model = transformers.BertForMaskedLM(cfg)
    with torch.no_grad():
        model.cls.predictions.decoder.weight.copy_(torch.randn_like(model.cls.predictions.decoder.weight))
    model.eval().save_pretrained(tmp_path, safe_serialization=True)
    shutil.copy(minilm_dir() / "tokenizer.json", tmp_path / "tokenizer.json")
    ref = transformers.BertForMaskedLM.from_pretrained(tmp_path, attn_implementation="eager").double().eval()
    ours = load_model(tmp_path, dtype="float64")
    assert ours.params.head.decoder is not None
    ids = list(ours.tokenize(CLEAN).ids)
    with torch.no_grad():
        want = ref(torch.tensor([ids])).logits[0].numpy()
    got = ours.family.masked_lm(ours.params, ours.config, ours.forward(ids).last_hidden_state)
    np.testing.assert_allclose(got, want, atol=1e-10, rtol=0)


def test_every_recovery_equals_transformers_with_hooks(built):
    """One length; the answer is read at the [MASK], found by itself (position 6 of [CLS] the capital of france is
    [MASK] . [SEP])."""
    result = check(built, CORRUPTED, EVERY)
    assert result.answer_position == (6, 6) and result.differing() == [4]


def test_prompts_of_two_lengths_equal_transformers_with_hooks_on_the_pairs(built):
    """[CLS] the capital of (0..3) and is [MASK] . [SEP] (5..8 of the clean prompt, 7..10 of the longer one) are
    paired; 'france' and 'the united kingdom' are left out; the [MASK] is at 6 and 8."""
    by_hand = [(0, 0), (1, 1), (2, 2), (3, 3), (5, 7), (6, 8), (7, 9), (8, 10)]
    result = check(built, LONGER, ("resid", "attn", "mlp", "heads", "q", "k", "v"), by_hand)
    assert result.answer_position == (6, 8)


def test_the_shipped_minilm_has_no_masked_lm_head_and_is_refused():
    """all-MiniLM-L6-v2 is a sentence-transformer: its folder holds the encoder and no cls.predictions."""
    ours = load_model(minilm_dir(), dtype="float64")
    with pytest.raises(QkvError, match="has no masked-LM head"):
        patch(ours, CLEAN, CORRUPTED, "paris", "rome")


@pytest.mark.parametrize("corrupted, fragments", [
    ("The [MASK] of France is paris.", ("clean prompt's [MASK] is at 6", "corrupted prompt's at 2", "partner (6)")),
    ("The capital of Italy is a [MASK] city", ("9 tokens and the corrupted one 10", "answer position 6 ('[MASK]')")),
])  # fmt: skip
def test_masks_that_do_not_pair_are_refused_before_any_forward(built, monkeypatch, corrupted, fragments):
    from qkv_cli.pipeline.patch import engine

    _, ours, _ = built
    monkeypatch.setattr(engine.Runner, "run", lambda *a, **k: pytest.fail("a forward ran before the refusal"))
    with pytest.raises(QkvError) as err:
        patch(ours, CLEAN, corrupted, "paris", "rome")
    for f in fragments:
        assert f in str(err.value)


def test_two_masks_in_the_clean_prompt_need_a_position(built):
    _, ours, _ = built
    with pytest.raises(QkvError, match=r"2 \[MASK\] tokens \(at 5, 6\): give --position N"):
        patch(ours, "The capital of France [MASK] [MASK].", CORRUPTED, "paris", "rome")
