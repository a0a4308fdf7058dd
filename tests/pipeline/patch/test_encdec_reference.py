"""qkv patch on encoder-decoders against the same patches made with forward hooks on transformers (eager attention,
float64 throughout), on tiny random T5, BART and Marian built by transformers in the test (tests/support/encdecs.py).

The reference is written here, on the Hugging Face modules of the patched stack: the layer's output for resid (its
hidden state at position i), the attention's output projection (T5's o, BART's out_proj) for attn, the feed-forward's
last linear map (DenseReluDense, fc2) for mlp, the output projection's input (head j's d_k columns) for heads, the q /
k / v projections' outputs (head j's columns, every position) for q / k / v (the cross-attention's k and v read the
encoder's output), and for pattern the output projection's input with head j's columns recomputed in torch as
alpha_j(clean) V_j from this run's own v projection. Each patch is one more transformers forward of both stacks; the
metric is computed here from the decoder's last logits.
"""

from __future__ import annotations

import numpy as np
import pytest
from decoders import float64_everywhere
from encdecs import build
from helpers import BuiltOnce, reference_import
from torch_hooks import hooked, keeper, pattern_hooks

from qkv_cli.models import load_model
from qkv_cli.pipeline.patch.encdec import patch

pytestmark = pytest.mark.reference
CLEAN, CORRUPTED, TARGET = "the cat sat on the mat", "the dog sat on a mat", "le chat"
EVERY = ("resid", "attn", "mlp", "heads", "q", "k", "v", "pattern")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return BuiltOnce(tmp_path_factory, build)


def t5_parts(model, side: str, l: int):  # -> the layer, {q, k, v}, the output projection, the feed-forward
    block = (model.encoder if side == "encoder" else model.decoder).block[l]
    att = block.layer[1].EncDecAttention if side == "cross" else block.layer[0].SelfAttention
    return block, {"q": att.q, "k": att.k, "v": att.v}, att.o, block.layer[-1].DenseReluDense


def bart_parts(model, side: str, l: int):  # BART and Marian
    layer = (model.model.encoder if side == "encoder" else model.model.decoder).layers[l]
    att = layer.encoder_attn if side == "cross" else layer.self_attn
    return layer, {"q": att.q_proj, "k": att.k_proj, "v": att.v_proj}, att.out_proj, layer.fc2


class Hooked:
    """transformers' encoder-decoder with one patch at a time made by forward hooks, and the clean run's activations
    of one stack and attention (side)."""

    def __init__(self, torch, model, side: str, tau: int):
        self.torch, self.model, self.side, self.tau = torch, model, side, tau
        self.parts = (lambda l: t5_parts(model, side, l)) if model.config.model_type in ("t5", "mt5", "umt5") else (
            lambda l: bart_parts(model, side, l))  # fmt: skip
        self.dk = self.parts(0)[2].in_features // tau

    def forward(self, src, dec, hooks=(), attentions=False):
        with hooked(hooks), float64_everywhere(self.torch), self.torch.no_grad():
            return self.model(input_ids=self.torch.tensor([src]), decoder_input_ids=self.torch.tensor([dec]),
                              output_attentions=attentions, use_cache=False)  # fmt: skip

    def capture(self, src, dec, L: int) -> dict:
        seen = {}
        keep = keeper(seen)

        hooks = []
        for l in range(L):
            layer, proj, o, ff = self.parts(l)
            hooks += [(layer, "post", keep(("resid", l))), (o, "post", keep(("attn", l))),
                      (ff, "post", keep(("mlp", l))), (o, "pre", keep(("heads", l), pre=True))]  # fmt: skip
            hooks += [(proj[x], "post", keep((x, l))) for x in "qkv"]
        out = self.forward(src, dec, hooks, attentions=True)
        weights = {"encoder": out.encoder_attentions, "decoder": out.decoder_attentions,
                   "cross": out.cross_attentions}[self.side]  # fmt: skip
        for l in range(L):
            seen[("alpha", l)] = weights[l][0].clone()
        return seen

    def patched(self, src, dec, clean, what: str, l: int, i: int):  # -> the decoder's last logits [V]
        layer, proj, o, ff = self.parts(l)
        cols = slice(i * self.dk, (i + 1) * self.dk)

        def replace(key, by_head):
            def fn(module, args, out):
                first = (out[0] if isinstance(out, tuple) else out).clone()
                if by_head:
                    first[..., cols] = clean[key][..., cols]
                else:
                    first[0, i] = clean[key][0, i]
                return (first, *out[1:]) if isinstance(out, tuple) else first

            return fn

        if what in ("resid", "attn", "mlp"):
            hooks = [({"resid": layer, "attn": o, "mlp": ff}[what], "post", replace((what, l), False))]
        elif what in ("q", "k", "v"):
            hooks = [(proj[what], "post", replace((what, l), True))]
        elif what == "heads":

            def heads(module, args):
                z = args[0].clone()
                z[..., cols] = clean[("heads", l)][..., cols]
                return (z, *args[1:])

            hooks = [(o, "pre", heads)]
        else:  # pattern: z_j = alpha_j(clean) V_j, V of this run (the v projection's output)
            hooks = pattern_hooks(proj["v"], o, clean[("alpha", l)][i], cols)
        return self.forward(src, dec, hooks).logits[0, -1].numpy()


def twin(torch, transformers, model):
    """The same weights in a model built float64 throughout (decoders.float64_everywhere), eager attention."""
    with float64_everywhere(torch):
        out = transformers.AutoModelForSeq2SeqLM.from_config(model.config, attn_implementation="eager",
                                                             dtype=torch.float64)  # fmt: skip
        out.load_state_dict(model.state_dict())
    return out.eval()


def metric(z, answer, wrong):
    return float(z[answer] - z[wrong])


def check(name, built, side, whats=EVERY, direction="denoise") -> dict:
    folder, model = built(name)
    torch, transformers = reference_import("torch"), reference_import("transformers")
    ours = load_model(folder, dtype="float64")
    result = patch(ours, CLEAN, CORRUPTED, TARGET, "est", "assis", what=whats, side=side, direction=direction)
    L = result.n_layers
    hooked = Hooked(torch, twin(torch, transformers, model), side, result.tau)
    ids_c, ids_x = list(ours.tokenize(CLEAN).ids), list(ours.tokenize(CORRUPTED).ids)
    dec = [ours.start_id, *ours.tokenize(TARGET, special=False).ids]
    src_ids, dst_ids = (ids_c, ids_x) if direction == "denoise" else (ids_x, ids_c)
    source = hooked.capture(src_ids, dec, L)
    m_c = metric(hooked.forward(ids_c, dec).logits[0, -1].numpy(), *result.answer[:1], result.wrong[0])
    m_x = metric(hooked.forward(ids_x, dec).logits[0, -1].numpy(), *result.answer[:1], result.wrong[0])
    np.testing.assert_allclose([result.metric_clean, result.metric_corrupted], [m_c, m_x], atol=1e-8, rtol=0)
    assert result.answer_position == (len(dec) - 1, len(dec) - 1)  # the decoder's last position, read above
    for what in whats:
        got = result.recovery[what]
        raw = np.array([[metric(hooked.patched(dst_ids, dec, source, what, l, i), result.answer[0], result.wrong[0])
                         for i in range(got.shape[1])] for l in range(L)])  # fmt: skip
        want = (raw - m_x) / (m_c - m_x)
        assert np.isfinite(want).all() and np.abs(want).max() > 1e-3, (what, want)  # the patches move the answer
        np.testing.assert_allclose(got, want, atol=1e-8, rtol=0, err_msg=f"{name} {side} {what}")
    return result


@pytest.mark.parametrize("side", ["encoder", "decoder", "cross"])
def test_every_recovery_of_t5_equals_transformers_with_hooks(built, side):
    result = check("t5", built, side)
    rows = 7 if side == "encoder" else 3  # 6 words and </s>; the start token and the target's 2 words
    assert result.recovery["resid"].shape == ((2, rows) if side == "encoder" else (3, rows))
    assert result.recovery["v"].shape == ((2, 4) if side == "encoder" else (3, 4))


@pytest.mark.parametrize("name", ["mt5", "umt5", "bart", "marian"])
def test_mt5_umt5_bart_and_marian(built, name):
    """mT5, UMT5 (a position-bias table per layer), and post-norm stacks with learned (BART) or sinusoidal (Marian)
    positions: the cross-attention's grids and the encoder's source positions."""
    check(name, built, "cross")
    check(name, built, "encoder", ("resid", "v"))


def test_noising_t5_equals_transformers(built):
    """--direction noise: the corrupted run's activations patched into the clean run."""
    check("t5", built, "cross", ("resid", "q", "k", "v"), direction="noise")
