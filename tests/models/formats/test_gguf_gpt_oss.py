"""A gpt-oss GGUF file with MXFP4 experts (support/gguf_convert_oss.py, written from llama.cpp's GptOssModel) against
transformers on the weights the file holds: every layer's attention within 1e-5 (float32) and 1e-10 (float64), the
sinks' share of each row, the hidden state, the logits and greedy generation."""

from __future__ import annotations

import numpy as np
import pytest
from decoders import attentions, build, float64_everywhere, float64_twin
from gguf_convert_oss import convert, expressible
from helpers import reference_import

from qkv_cli.models import load_model

pytestmark = pytest.mark.reference
IDS = [int(i) for i in np.random.default_rng(4).integers(3, 1400, 19)]


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """(GGUF path, the transformers model holding the file's weights: MXFP4 experts as dequantized by gguf-py)."""
    torch, transformers, gguf = (reference_import(n) for n in ("torch", "transformers", "gguf"))
    model = expressible(transformers, torch, build(transformers, torch, "gpt_oss-gguf", tmp_path_factory.mktemp("hf")))
    path = tmp_path_factory.mktemp("gguf") / "gpt-oss.gguf"
    stored = convert(gguf, model, path)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name in stored:
                p.copy_(torch.from_numpy(np.ascontiguousarray(stored[name])))
    return path, model


def test_the_file_is_gpt_oss_with_mxfp4_experts(made):
    from qkv_cli.models.formats.gguf.reader import read_gguf

    path, model = made
    f = read_gguf(path)
    assert f.metadata["general.architecture"] == "gpt-oss"
    kinds = {n.split(".")[2]: t.kind for n, t in f.tensors.items() if n.startswith("blk.0.") and n.endswith(".weight")}
    assert kinds["ffn_gate_exps"] == kinds["ffn_up_exps"] == kinds["ffn_down_exps"] == "MXFP4"
    c = load_model(path).config
    assert (c.family, c.mlp.moe.experts, c.mlp.moe.top_k, c.attention.sinks) == ("gpt_oss", 4, 2, True)
    assert c.attention.layer_types == tuple(model.config.layer_types)


def test_float32_attention_sinks_hidden_state_and_logits(made, torch):
    path, model = made
    ours = load_model(path, dtype="float32")
    run = ours.forward(IDS)
    for layer, want in enumerate(attentions(torch, model, IDS)):
        np.testing.assert_allclose(run.attentions[layer], want, atol=1e-5, rtol=0, err_msg=f"layer {layer}")
        np.testing.assert_allclose(run.sinks[layer], 1 - want.sum(-1), atol=1e-5)
    assert run.sinks.max() > 0.5
    with torch.no_grad():
        out = model(torch.tensor([IDS]), output_hidden_states=True)
    np.testing.assert_allclose(run.last_hidden_state, out.hidden_states[-1][0].numpy(), atol=2e-4, rtol=1e-4)
    z = ours.family.logits(ours.params, ours.config, run.last_hidden_state)
    np.testing.assert_allclose(z, out.logits[0].numpy(), atol=5e-4, rtol=1e-4)


def test_float64_attention_matches_a_float64_transformers(made, torch, transformers):
    path, model = made
    with float64_everywhere(torch):
        twin = float64_twin(transformers, torch, model)
        ref = attentions(torch, twin, IDS)
    run = load_model(path, dtype="float64").forward(IDS)
    for layer, want in enumerate(ref):
        np.testing.assert_allclose(run.attentions[layer], want, atol=1e-10, rtol=0, err_msg=f"layer {layer}")


def test_greedy_generation_equals_transformers(made, torch):
    from qkv_cli.pipeline.generate import generate
    from qkv_cli.text.tokens import Tokens

    path, model = made
    prompt = IDS[:7]
    model.generation_config.eos_token_id, model.generation_config.pad_token_id = None, 0
    with torch.no_grad():
        want = model.generate(torch.tensor([prompt]), max_new_tokens=12, min_new_tokens=12, do_sample=False)
    labels = tuple(str(i) for i in prompt)
    gen = generate(load_model(path, dtype="float32"), Tokens(labels, labels, ((0, 0),) * 7, tuple(prompt)), 12)
    assert gen.step_ids.tolist() == want[0, 7:].tolist()
