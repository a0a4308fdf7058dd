"""qkv patch against the same patches made with forward hooks on transformers (eager attention, float64 throughout).

The reference is written here, on the Hugging Face modules: the decoder layer's output for resid (hidden_states[l +
1]), o_proj's output for attn, the MLP's output for mlp, o_proj's input (head j's d_k columns) for heads, q_proj /
k_proj / v_proj's output (head j's or key/value head g's columns) for q / k / v (GPT-2: c_attn's three blocks,
c_proj), and for pattern o_proj's input with head j's columns recomputed in torch as alpha_j(clean) V_g(j) from the
run's own v_proj output. Each patch is one more transformers forward; the metric is computed from its logits here.
"""

from __future__ import annotations

import numpy as np
import pytest
from decoders import build, float64_everywhere, float64_twin
from helpers import BuiltOnce, reference_import, smollm2_gguf
from torch_hooks import hooked, keeper, pattern_hooks

from qkv_cli.models import load_model
from qkv_cli.pipeline.patch.engine import patch

pytestmark = pytest.mark.reference
CLEAN, CORRUPTED = "The cat sat on the mat and the dog", "The dog sat on the mat and the cat"
EVERY = ("resid", "attn", "mlp", "heads", "q", "k", "v", "pattern")


def build_gpt2(transformers, torch, name, folder):
    """A tiny random GPT-2 (3 layers, 4 heads, d 32), weights N(0, 0.3) so attention is peaked."""
    import shutil

    from tokenizers import Tokenizer

    from qkv_cli.text.tokens import BPE_PATH

    vocab = Tokenizer.from_file(str(BPE_PATH)).get_vocab_size()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=vocab, n_positions=64, n_embd=32, n_layer=3, n_head=4)
    model = transformers.GPT2LMHeadModel(cfg)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * 0.3 + (1.0 if pname.endswith("ln_1.weight") else 0.0))
    model.eval().save_pretrained(folder, safe_serialization=True)
    shutil.copy(BPE_PATH, folder / "tokenizer.json")
    return model


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return BuiltOnce(tmp_path_factory, lambda t, torch, name, folder: (build_gpt2 if name == "gpt2" else build)(
        t, torch, name, folder))  # fmt: skip


class Hooked:
    """transformers' model with one patch at a time made by forward hooks, and the clean run's activations."""

    def __init__(self, torch, model):
        self.torch, self.model = torch, model
        base = model.transformer if hasattr(model, "transformer") else model.model
        self.layers = base.h if hasattr(base, "h") else base.layers
        cfg = model.config
        self.tau = cfg.num_attention_heads
        self.G = getattr(cfg, "num_key_value_heads", None) or self.tau
        self.dk = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.tau

    def modules(self, l):  # -> q, k, v (module, first column), o, mlp
        layer = self.layers[l]
        att = layer.attn if hasattr(layer, "attn") else layer.self_attn
        if hasattr(att, "c_attn"):  # GPT-2: one Conv1D [Q | K | V]
            d = self.tau * self.dk
            return {"q": (att.c_attn, 0), "k": (att.c_attn, d), "v": (att.c_attn, 2 * d)}, att.c_proj, layer.mlp
        return {"q": (att.q_proj, 0), "k": (att.k_proj, 0), "v": (att.v_proj, 0)}, att.o_proj, layer.mlp

    def forward(self, ids, hooks=(), attentions=False):  # hooks: (module, kind, fn) -> last logits [V]
        with hooked(hooks), float64_everywhere(self.torch), self.torch.no_grad():
            out = self.model(self.torch.tensor([ids]), output_attentions=attentions)
        return out

    def capture(self, ids):
        """The clean run's activations: per layer resid, attn, mlp, o's input, q/k/v outputs, and the weights."""
        seen = {}
        keep = keeper(seen)

        hooks = []
        for l in range(len(self.layers)):
            proj, o, mlp = self.modules(l)
            hooks += [(self.layers[l], "post", keep(("resid", l))), (o, "post", keep(("attn", l))),
                      (mlp, "post", keep(("mlp", l))), (o, "pre", keep(("heads", l), pre=True))]  # fmt: skip
            hooks += [(proj["q"][0], "post", keep(("proj_q", l)))]
            if proj["k"][0] is not proj["q"][0]:
                hooks += [(proj["k"][0], "post", keep(("proj_k", l))), (proj["v"][0], "post", keep(("proj_v", l)))]
        out = self.forward(ids, hooks, attentions=True)
        for l in range(len(self.layers)):
            seen[("alpha", l)] = out.attentions[l][0].clone()
            for x in "kv":
                seen.setdefault((f"proj_{x}", l), seen[("proj_q", l)])
        return seen

    def patched(self, ids, clean, what, l, i):  # -> last logits [V] with index i of `what` at layer l patched
        proj, o, mlp = self.modules(l)
        dk = self.dk

        def replace_out(key, cols=None):
            def fn(module, args, out):
                first = out[0] if isinstance(out, tuple) else out
                first = first.clone()
                if cols is None:
                    first[0, i] = clean[key][0, i]
                else:
                    first[..., cols] = clean[key][..., cols]
                return (first, *out[1:]) if isinstance(out, tuple) else first

            return fn

        if what in ("resid", "attn", "mlp"):
            module = {"resid": self.layers[l], "attn": o, "mlp": mlp}[what]
            hooks = [(module, "post", replace_out((what, l)))]
        elif what in "qkv":
            module, first = proj[what]
            hooks = [(module, "post", replace_out((f"proj_{what}", l), slice(first + i * dk, first + (i + 1) * dk)))]
        elif what == "heads":

            def heads(module, args):
                z = args[0].clone()
                z[..., i * dk : (i + 1) * dk] = clean[("heads", l)][..., i * dk : (i + 1) * dk]
                return (z, *args[1:])

            hooks = [(o, "pre", heads)]
        else:  # pattern: z_j = alpha_j(clean) V_g(j), V of this run (v_proj's output)
            vmod, first = proj["v"]
            g = i // (self.tau // self.G)
            cols, v_cols = slice(i * dk, (i + 1) * dk), slice(first + g * dk, first + (g + 1) * dk)
            hooks = pattern_hooks(vmod, o, clean[("alpha", l)][i], cols, v_cols)
        return self.forward(ids, hooks).logits[0, -1].numpy()


def metric(z, answer, wrong):
    return float(z[answer] - z[wrong])


def reference_recovery(hooked, ids_c, ids_x, answer, wrong, what, L, cols) -> np.ndarray:
    clean = hooked.capture(ids_c)
    m_c = metric(hooked.forward(ids_c).logits[0, -1].numpy(), answer, wrong)
    m_x = metric(hooked.forward(ids_x).logits[0, -1].numpy(), answer, wrong)
    got = np.array([[metric(hooked.patched(ids_x, clean, what, l, i), answer, wrong) for i in range(cols)]
                    for l in range(L)])  # fmt: skip
    return (got - m_x) / (m_c - m_x)


def check(torch, transformers, folder, model, whats, clean=CLEAN, corrupted=CORRUPTED, answer=" cat", wrong=" dog",
          layers=None) -> None:  # fmt: skip
    ours = load_model(folder, dtype="float64") if not hasattr(folder, "config") else folder
    result = patch(ours, clean, corrupted, answer, wrong, what=whats)
    with float64_everywhere(torch):
        hooked = Hooked(torch, float64_twin(transformers, torch, model))
    ids_c, ids_x = list(ours.tokenize(clean).ids), list(ours.tokenize(corrupted).ids)
    for what in whats:
        got = result.recovery[what]
        want = reference_recovery(hooked, ids_c, ids_x, result.answer[0], result.wrong[0], what, got.shape[0],
                                  got.shape[1])  # fmt: skip
        assert np.isfinite(want).all() and np.abs(want).max() > 1e-3, what  # the patches move the answer
        np.testing.assert_allclose(got, want, atol=1e-8, rtol=0, err_msg=what)


@pytest.mark.parametrize("name", ["gpt2", "llama", "gemma3_text", "qwen3_moe"])
def test_every_recovery_equals_transformers_with_hooks(built, name):
    folder, model = built(name)
    torch, transformers = reference_import("torch"), reference_import("transformers")
    check(torch, transformers, folder, model, EVERY)


def test_a_key_value_head_patch_reaches_every_query_head_of_its_group(built):
    """llama has tau = 4 query heads on G = 2 key/value heads: patching V^[g] is patching the value read by heads 2g
    and 2g + 1 at once; the grid has G columns, and equals transformers' v_proj patch of those d_k columns."""
    folder, model = built("llama")
    result = patch(load_model(folder, dtype="float64"), CLEAN, CORRUPTED, " cat", " dog", what=("heads", "v"))
    assert result.recovery["v"].shape == (3, 2) and result.recovery["heads"].shape == (3, 4)
    assert result.column_labels("v") == ["KV0", "KV1"]


def test_the_shipped_smollm2(tmp_path):
    """SmolLM2-135M (Q4_1 GGUF, 30 layers, 9 query heads on 3 key/value heads): every key/value head's V patched
    (each reaching three query heads), on the file as transformers' GGUF loader reads it."""
    from helpers import gguf_reference

    path = smollm2_gguf()
    transformers, torch, ref = gguf_reference(path)
    ours = load_model(path, dtype="float64")
    check(torch, transformers, ours, ref, ("v",), "The capital of France is", "The capital of Italy is",
          " Paris", " Rome")  # fmt: skip
