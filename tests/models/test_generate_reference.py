"""Generation through the NumPy KV cache against transformers' generate, on tiny random decoders it built.

Greedy ids equal transformers'; each step's attention row equals the row of one full forward pass over the final
sequence (which proves the cache: to 1e-12 in float64; in float32 to 1e-5, float32's bound throughout, on these
deliberately sharp random models, because BLAS sums a one-row product in another order than a twenty-row one and the
sharp weights amplify the last-bit difference: up to 5.8e-6 measured, on gpt-oss; the real SmolLM2 gives 2e-6 to
4e-6, tests/models/test_smollm2.py); probabilities equal
softmax(transformers' logits).
"""

from __future__ import annotations

import numpy as np
import pytest
from decoders import build

from qkv_cli.models import load_model
from qkv_cli.pipeline.generate import generate
from qkv_cli.text.tokens import Tokens

pytestmark = pytest.mark.reference
NEW = 20


def prompt_tokens(ids) -> Tokens:
    strings = tuple(str(i) for i in ids)
    return Tokens(strings=strings, labels=strings, offsets=((0, 0),) * len(ids), ids=tuple(ids))


def reference_generate(torch, model, ids, new):
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=new, do_sample=False, min_new_tokens=new)
    return out[0, len(ids) :].tolist()


@pytest.mark.parametrize("name", ["llama", "llama-tied-bias", "mistral", "qwen2", "gemma2", "gemma3_text", "gpt_neox",
                                  "olmo2", "smollm3", "phi3", "phi3-longrope", "mixtral", "qwen3_moe",
                                  "olmoe", "deepseek_v3", "deepseek_v3-yarn", "deepseek_v3-moe",
                                  "deepseek_v2-groups", "gpt_oss", "llama4_text", "llama4_text-list",
                                  "llama4_text-moe"])  # fmt: skip
def test_greedy_ids_rows_and_probabilities_match(name, tmp_path, torch, transformers):
    model = build(transformers, torch, name, tmp_path / name)
    ours = load_model(tmp_path / name, dtype="float32")
    prompt = [int(i) for i in np.random.default_rng(7).integers(3, 1400, 9)]
    want = reference_generate(torch, model, prompt, NEW)
    gen = generate(ours, prompt_tokens(prompt), NEW)
    assert gen.step_ids.tolist() == want
    full = prompt + want
    with torch.no_grad():
        ref = model(torch.tensor([full]), output_attentions=True)
    logits = ref.logits[0].double().numpy()
    ours_full = ours.forward(full).attentions  # one full forward pass of our own over the final sequence
    P = len(prompt)
    for t in range(NEW):
        q = P + t - 1  # the query that wrote token P + t
        got = gen.step_attentions[t, :, :, : q + 1]
        np.testing.assert_allclose(got, ours_full[:, :, q, : q + 1], atol=1e-5, err_msg=f"{name} step {t}: the cache")
        for layer, a in enumerate(ref.attentions):
            np.testing.assert_allclose(got[layer], a[0, :, q, : q + 1].numpy(), atol=1e-5,
                                       err_msg=f"{name} step {t} layer {layer}: transformers")  # fmt: skip
        assert not gen.step_attentions[t, :, :, q + 1 :].any()  # zeros past the step's length
        p = np.exp(logits[q] - logits[q].max())
        p /= p.sum()
        np.testing.assert_allclose(gen.step_probs[t], p[want[t]], atol=1e-5)
        np.testing.assert_allclose(gen.step_top_probs[t], np.sort(p)[::-1][:5], atol=1e-5)


def test_cache_equals_a_full_forward_in_float64(tmp_path, torch, transformers):
    """The cached rows equal a float64 full forward over the final sequence to rounding: the cache is exact."""
    build(transformers, torch, "gemma2", tmp_path / "g")
    ours = load_model(tmp_path / "g", dtype="float64")
    prompt = [5, 9, 200, 33, 71, 8]
    gen = generate(ours, prompt_tokens(prompt), 12)
    run = ours.forward(gen.ids)
    for t in range(len(gen.step_ids)):
        q = len(prompt) + t - 1
        np.testing.assert_allclose(gen.step_attentions[t, :, :, : q + 1], run.attentions[:, :, q, : q + 1], atol=1e-12)


def test_gpt2_generates_like_transformers(gpt2_dir, torch, transformers):
    model = transformers.GPT2LMHeadModel.from_pretrained(gpt2_dir, attn_implementation="eager").eval()
    prompt = [11, 400, 27, 3, 98]
    want = reference_generate(torch, model, prompt, 12)
    assert generate(load_model(gpt2_dir), prompt_tokens(prompt), 12).step_ids.tolist() == want


def test_sampling_is_seeded_and_respects_top_k(tmp_path, torch, transformers):
    build(transformers, torch, "llama", tmp_path / "l")
    ours = load_model(tmp_path / "l")
    prompt = prompt_tokens([4, 8, 15, 16, 23, 42])
    a = generate(ours, prompt, 10, temperature=1.5, top_k=3, seed=1)
    b = generate(ours, prompt, 10, temperature=1.5, top_k=3, seed=1)
    assert a.step_ids.tolist() == b.step_ids.tolist()
    assert all(token in top[:3] for token, top in zip(a.step_ids, a.step_top_ids, strict=True))
    c = generate(ours, prompt, 10, temperature=1.5, top_k=3, seed=2)
    assert c.step_ids.tolist() != a.step_ids.tolist()


def test_longrope_generation_crossing_the_original_context(tmp_path, torch, transformers):
    """Phi-3's LongRoPE: a prompt within original_max_position_embeddings (8) generating past it. The steps within
    it turn by the short factors; at the switch the cache is recomputed with the long ones, as transformers' Phi-3
    generation does: the same ids, each step's probabilities softmax of its scores, and the last step's row that
    of one full forward pass (long factors for every key)."""
    model = build(transformers, torch, "phi3-longrope", tmp_path / "p")
    ours = load_model(tmp_path / "p", dtype="float32")
    prompt = [int(i) for i in np.random.default_rng(3).integers(3, 1400, 5)]
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=12, min_new_tokens=12, do_sample=False,
                             output_scores=True, return_dict_in_generate=True)  # fmt: skip
    want = out.sequences[0, len(prompt) :].tolist()
    gen = generate(ours, prompt_tokens(prompt), 12)
    assert gen.step_ids.tolist() == want
    for t, scores in enumerate(out.scores):
        z = scores[0].double().numpy()
        p = np.exp(z - z.max())
        p /= p.sum()
        np.testing.assert_allclose(gen.step_probs[t], p[want[t]], atol=1e-5, err_msg=f"step {t}")
    # float32's tolerance, 1e-5: a cached row and a full pass sum in other orders (up to 5.2e-6 measured, by host)
    n = len(prompt) + 11  # the last step's query reads 16 tokens
    full = ours.forward(prompt + want[:-1]).attentions  # one pass over them: long factors for every key
    np.testing.assert_allclose(gen.step_attentions[-1, :, :, :n], full[:, :, -1, :n], atol=1e-5)
    short = ours.forward(prompt + want[:2]).attentions  # 7 tokens: short factors
    np.testing.assert_allclose(gen.step_attentions[2, :, :, :7], short[:, :, -1, :7], atol=1e-5)
