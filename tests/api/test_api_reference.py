"""The Python API on the real SmolLM2-135M-Instruct GGUF against transformers' own GGUF loader: the same ids and
every layer's attention within 1e-5 in float32 (eager attention), as the CLI is held to."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import reference_import, smollm2_gguf

import qkv_cli as qkv

pytestmark = pytest.mark.reference
TEXT = "The cat sat on the mat because it was tired, and then it slept."


def test_run_attentions_equal_transformers():
    torch = reference_import("torch")
    transformers = reference_import("transformers")
    reference_import("gguf")
    reference_import("accelerate")
    path = smollm2_gguf()
    tok = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    ref = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, attn_implementation="eager", dtype=torch.float32
    ).eval()
    ids = tok(TEXT)["input_ids"]
    with torch.no_grad():
        expected = np.stack([a[0].numpy() for a in ref(torch.tensor([ids]), output_attentions=True).attentions])
    r = qkv.run(TEXT, model=qkv.load(str(path), dtype="float32"), layer=[0, -1])
    assert list(r.ids) == list(ids)
    assert r.attentions.shape == expected.shape
    assert np.abs(r.attentions - expected).max() < 1e-5
    assert np.abs(r.layer(-1).weights - expected[-1]).max() < 1e-5
