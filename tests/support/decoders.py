"""Tiny random RoPE decoders of every family, built and saved by transformers (the reference), for the tests.

Weights are scaled up (N(0, 0.3)) and norm weights randomised so attention is peaked: default initialisation gives
near-uniform weights that hide mistakes. Windows are shorter than the texts, key/value heads fewer than query heads.
"""

from __future__ import annotations

import shutil

BASE = {"hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 3,
        "intermediate_size": 48, "max_position_embeddings": 64, "tie_word_embeddings": False}  # fmt: skip

MLA = {"num_key_value_heads": 4, "q_lora_rank": 12, "kv_lora_rank": 10, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4,
       "v_head_dim": 6, "first_k_dense_replace": 3, "rms_norm_eps": 1e-5}  # fmt: skip

DEEPSEEK_MOE = {"first_k_dense_replace": 1, "n_routed_experts": 8, "n_group": 2, "topk_group": 1,
                "num_experts_per_tok": 2, "moe_intermediate_size": 8, "n_shared_experts": 1,
                "routed_scaling_factor": 2.5}  # fmt: skip

# name -> (model_type, config overrides); texts are 12-20 tokens, so every window below is shorter
CASES = {
    "llama": ("llama", {"rms_norm_eps": 1e-5, "rope_parameters": {"rope_type": "default", "rope_theta": 500.0}}),
    "llama-tied-bias": ("llama", {"tie_word_embeddings": True, "attention_bias": True, "mlp_bias": True}),
    "llama-linear": ("llama", {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 100.0}}),
    "llama-dynamic": ("llama", {"max_position_embeddings": 12,
                                "rope_parameters": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 100.0}}),
    "llama-llama3": ("llama", {"rope_parameters": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 8,
                                                   "rope_theta": 100.0}}),
    "llama-yarn": ("llama", {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 100.0,
                                                 "original_max_position_embeddings": 16}}),
    "mistral": ("mistral", {"sliding_window": 5, "head_dim": 8}),
    "qwen2": ("qwen2", {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 1}),
    "qwen3": ("qwen3", {"head_dim": 12, "use_sliding_window": True, "sliding_window": 6, "max_window_layers": 2}),
    "gemma2": ("gemma2", {"head_dim": 16, "query_pre_attn_scalar": 24, "sliding_window": 4,
                          "attn_logit_softcapping": 5.0, "final_logit_softcapping": 3.0}),
    "gemma3_text": ("gemma3_text", {
        "head_dim": 16, "query_pre_attn_scalar": 20, "sliding_window": 5,
        "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
        "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 300.0},
                            "full_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 5000.0}}}),
    "gpt_neox": ("gpt_neox", {"num_attention_heads": 2, "rotary_pct": 0.25, "rotary_emb_base": 200.0,
                              "layer_norm_eps": 1e-5}),
    "gpt_neox-sequential": ("gpt_neox", {"num_attention_heads": 2, "use_parallel_residual": False,
                                         "partial_rotary_factor": 0.5}),
    "olmo2": ("olmo2", {"rms_norm_eps": 1e-5}),
    "smollm3": ("smollm3", {"num_hidden_layers": 4, "no_rope_layer_interval": 2, "use_sliding_window": True,
                            "sliding_window": 5, "rope_parameters": {"rope_type": "default", "rope_theta": 300.0}}),
    "smollm3-list": ("smollm3", {"no_rope_layers": [1, 0, 0], "tie_word_embeddings": True}),
    "phi3": ("phi3", {"sliding_window": 5, "rope_parameters": {"rope_type": "default", "rope_theta": 300.0}}),
    "phi3-longrope": ("phi3", {"max_position_embeddings": 32, "original_max_position_embeddings": 8,
                               "rope_parameters": {"rope_type": "longrope", "rope_theta": 200.0,
                                                   "partial_rotary_factor": 0.75, "short_factor": [1.0, 1.3, 2.0],
                                                   "long_factor": [1.5, 4.0, 9.0]}}),
    # as Phi-4-mini: LongRoPE over 3/4 of each head, the output head tied to the embeddings, no window
    "phi3-tied": ("phi3", {"tie_word_embeddings": True, "max_position_embeddings": 48,
                           "original_max_position_embeddings": 12,
                           "rope_parameters": {"rope_type": "longrope", "rope_theta": 250.0,
                                               "partial_rotary_factor": 0.75, "short_factor": [1.0, 1.1, 1.6],
                                               "long_factor": [1.2, 3.0, 7.5]}}),
    "gpt_oss": ("gpt_oss", {"head_dim": 8, "sliding_window": 5, "num_local_experts": 4, "num_experts_per_tok": 2,
                            "intermediate_size": 24, "swiglu_limit": 1.5,  # clamps both ways at this scale
                            "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                                "truncate": False, "original_max_position_embeddings": 16,
                                                "rope_theta": 300.0}}),
    "gpt_oss-gguf": ("gpt_oss", {"head_dim": 8, "sliding_window": 5, "num_local_experts": 4, "num_experts_per_tok": 2,
                                 "intermediate_size": 32,  # MXFP4 blocks of 32 along each expert row
                                 "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "truncate": True,
                                                     "original_max_position_embeddings": 16, "rope_theta": 300.0}}),
    # multi-head latent attention: q.k width 8 + 4 = 12, values 6 wide; every layer dense (the MoE ones: below)
    "deepseek_v3": ("deepseek_v3", {**MLA, "rope_parameters": {"rope_type": "default", "rope_theta": 300.0}}),
    "deepseek_v3-yarn": ("deepseek_v3", {**MLA, "q_lora_rank": None, "rope_interleave": False, "attention_bias": True,
                                         "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 100.0,
                                                             "mscale": 0.9, "mscale_all_dim": 0.7,
                                                             "original_max_position_embeddings": 16}}),
    # DeepSeekMoE after the first layer: 8 routed experts in 2 groups (a token picks from 1), 2 per token, 1 shared
    "deepseek_v3-moe": ("deepseek_v3", {**MLA, **DEEPSEEK_MOE}),
    # DeepSeek-V2: a softmax router, the k best (greedy) or the k best within the best group, never renormalised
    "deepseek_v2": ("deepseek_v2", {**MLA, **DEEPSEEK_MOE, "routed_scaling_factor": 1.5}),
    "deepseek_v2-groups": ("deepseek_v2", {**MLA, **DEEPSEEK_MOE, "q_lora_rank": None,
                                           "topk_method": "group_limited_greedy",
                                           "rope_parameters": {"rope_type": "default", "rope_theta": 200.0}}),
    "mixtral": ("mixtral", {"num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": 5,
                            "rope_parameters": {"rope_type": "default", "rope_theta": 300.0}}),
    "qwen3_moe": ("qwen3_moe", {"head_dim": 12, "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 24,
                                "norm_topk_prob": True, "mlp_only_layers": [1]}),
    "qwen3_moe-sliding": ("qwen3_moe", {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 24,
                                        "use_sliding_window": True, "sliding_window": 5, "max_window_layers": 1}),
    "qwen3_moe-step": ("qwen3_moe", {"num_hidden_layers": 4, "num_experts": 4, "num_experts_per_tok": 2,
                                     "moe_intermediate_size": 24, "decoder_sparse_step": 2}),
    "olmoe": ("olmoe", {"num_experts": 4, "num_experts_per_tok": 2, "rms_norm_eps": 1e-5}),
    # 4 layers: 0-2 RoPE and chunked (n_ch 5), 3 NoPE with its query temperature (floor_scale 2: it grows along the
    # text); every layer dense (moe_layers [], intermediate_size_mlp the dense width)
    "llama4_text": ("llama4_text", {"num_hidden_layers": 4, "attention_chunk_size": 5, "floor_scale": 2, "head_dim": 8,
                                    "attn_scale": 0.5, "moe_layers": [], "intermediate_size_mlp": 40,
                                    "rope_parameters": {"rope_type": "default", "rope_theta": 300.0}}),
    "llama4_text-list": ("llama4_text", {"no_rope_layers": [1, 0, 1], "attention_chunk_size": 4, "floor_scale": 3,
                                         "use_qk_norm": False, "interleave_moe_layer_step": 5, "head_dim": 16,
                                         "intermediate_size_mlp": 24, "tie_word_embeddings": True}),
    # MoE layers 1 and 3 (interleave step 2): 4 experts, top-k 2, a shared expert; 0 and 2 dense
    "llama4_text-moe": ("llama4_text", {"num_hidden_layers": 4, "attention_chunk_size": 6, "floor_scale": 2,
                                        "head_dim": 8, "num_local_experts": 4, "num_experts_per_tok": 2,
                                        "interleave_moe_layer_step": 2, "intermediate_size_mlp": 40,
                                        "rope_parameters": {"rope_type": "default", "rope_theta": 300.0}}),
}  # fmt: skip
MOE = (
    "mixtral",
    "qwen3_moe",
    "qwen3_moe-sliding",
    "qwen3_moe-step",
    "olmoe",
    "gpt_oss",
    "gpt_oss-gguf",
)  # mixtures of experts: 4 experts, top-k 2


def eager(model_type: str) -> dict:
    """transformers' eager implementations: the attention, and a MoE model's experts (one loop over the experts, as
    the modeling files write them; the default grouped matrix product refuses float64)."""
    moe = model_type in {CASES[name][0] for name in MOE} or model_type.startswith("deepseek")
    return {"attn_implementation": "eager", **({"experts_implementation": "eager"} if moe else {})}


def config(transformers, name: str, vocab: int):
    model_type, overrides = CASES[name]
    values = dict(BASE, vocab_size=vocab, **overrides)
    if model_type == "gpt_neox":
        values.pop("num_key_value_heads")
    if model_type in ("smollm3", "phi3", "olmoe", "gpt_oss", "llama4_text"):  # default ids outside the tiny vocabulary
        values.update(pad_token_id=None, bos_token_id=1, eos_token_id=2)
    return transformers.AutoConfig.for_model(model_type, **values)


def build(transformers, torch, name: str, folder, seed: int = 0):
    """Save a tiny random model of case `name` (and qkv's small BPE as its tokenizer) to folder; return the model."""
    from tokenizers import Tokenizer

    from qkv_cli.text.tokens import BPE_PATH

    vocab = Tokenizer.from_file(str(BPE_PATH)).get_vocab_size()
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config(transformers, name, vocab), **eager(CASES[name][0]))
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if pname.endswith("sinks"):  # gpt-oss: large enough to take a visible share of every row
                p.copy_(torch.randn_like(p) * 1.5 + 1.0)
            elif "norm" in pname:
                gemma = model.config.model_type.startswith("gemma")  # stored as w - 1
                p.copy_(torch.randn_like(p) * 0.3 + (0.0 if gemma else 1.0))
            else:
                p.copy_(torch.randn_like(p) * 0.3)
        for bname, b in model.named_buffers():
            if bname.endswith("e_score_correction_bias"):  # DeepSeek-V3's router bias: random, so that it matters
                b.copy_(torch.randn_like(b) * 0.3)
    model.eval()
    model.save_pretrained(folder, safe_serialization=True)
    shutil.copy(BPE_PATH, folder / "tokenizer.json")
    return model


def attentions(torch, model, ids) -> list:
    """Every layer's attention weights (tau, m, m) from transformers' eager forward."""
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_attentions=True)
    return [a[0].numpy() for a in out.attentions]


def check_float32(torch, path, model, lengths=(1, 7, 19)) -> None:
    """qkv's float32 forward of the file at `path` against transformers' eager `model`, on texts of each length:
    every layer's attention within 1e-5, the logits within 5e-4."""
    import numpy as np

    from qkv_cli.models import load_model

    ours = load_model(path, dtype="float32")
    for m in lengths:
        ids = ids_for(m, m)
        run = ours.forward(ids)
        for layer, want in enumerate(attentions(torch, model, ids)):
            np.testing.assert_allclose(run.attentions[layer], want, atol=1e-5, rtol=0, err_msg=f"{m}: layer {layer}")
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].numpy()
        z = ours.family.logits(ours.params, ours.config, run.last_hidden_state)
        np.testing.assert_allclose(z, logits, atol=5e-4, rtol=1e-4)


def check_float64(torch, transformers, path, model, lengths=(19,)) -> None:
    """qkv's float64 forward of the file against a float64 copy of `model`: every layer's attention within 1e-10."""
    import numpy as np

    from qkv_cli.models import load_model

    ours = load_model(path, dtype="float64")
    for m in lengths:
        ids = ids_for(m, 1)
        with float64_everywhere(torch):
            ref = attentions(torch, float64_twin(transformers, torch, model), ids)
        run = ours.forward(ids)
        for layer, want in enumerate(ref):
            np.testing.assert_allclose(run.attentions[layer], want, atol=1e-10, rtol=0, err_msg=f"{m}: layer {layer}")


def check_greedy(torch, path, model, m: int = 9, new: int = 12) -> None:
    """qkv's greedy generation of `new` tokens from the file, after an m-token prompt, writes transformers' ids."""
    from qkv_cli.models import load_model
    from qkv_cli.pipeline.generate import generate
    from qkv_cli.text.tokens import Tokens

    prompt = ids_for(m, 7)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    with torch.no_grad():
        want = model.generate(torch.tensor([prompt]), max_new_tokens=new, min_new_tokens=new, do_sample=False)
    labels = tuple(str(i) for i in prompt)
    tokens = Tokens(strings=labels, labels=labels, offsets=((0, 0),) * m, ids=tuple(prompt))
    gen = generate(load_model(path, dtype="float32"), tokens, new)
    assert gen.step_ids.tolist() == want[0, m:].tolist()


def llama4_router_logits(torch, model, ids) -> dict:
    """layer -> the router logits (m, E) of each MoE layer of a Llama 4 model (its Llama4Router, read by a hook)."""
    seen = {}
    for l, layer in enumerate(model.model.layers):
        if hasattr(layer.feed_forward, "router"):
            layer.feed_forward.router.register_forward_hook(lambda mod, a, out, l=l: seen.__setitem__(l, out[1]))
    with torch.no_grad():
        model(torch.tensor([ids]))
    return seen


def reference_routing(torch, model, ids) -> dict:
    """layer -> (top [m, k], weights [m, k]) from the router module of each MoE layer (its forward's output)."""
    seen, handles = {}, []
    for l, layer in enumerate(model.model.layers):
        moe = getattr(layer, "block_sparse_moe", None) or layer.mlp
        router = getattr(moe, "gate", None) or getattr(moe, "router", None)  # gpt-oss: mlp.router
        if not hasattr(router, "top_k"):
            continue  # a dense MLP layer

        def keep(module, args, out, l=l):
            _, weights, top = out
            seen[l] = (top.numpy(), weights.double().numpy())

        handles.append(router.register_forward_hook(keep))
    with torch.no_grad():
        model(torch.tensor([ids]))
    for h in handles:
        h.remove()
    return seen


def last_hidden(torch, model, ids):
    """transformers' hidden state after the final norm (m, d); Llama4ForCausalLM's base_model is itself."""
    base = model.base_model if model.base_model is not model else model.model
    with torch.no_grad():
        return base(torch.tensor([ids])).last_hidden_state[0].numpy()


class float64_everywhere:  # noqa: N801  (a context manager, used like a function)
    """transformers computes RoPE frequencies (and LongRoPE's factors), RMSNorm and the eager softmax in float32 even
    in a float64 model; inside this context every float32 request becomes float64, so a model built here is float64
    throughout."""

    def __init__(self, torch):
        self.torch = torch

    def __enter__(self):
        torch = self.torch
        self.saved = (torch.get_default_dtype(), torch.Tensor.float, torch.Tensor.to, torch.nn.functional.softmax,
                      torch.arange, torch.tensor)  # fmt: skip
        plain_to, plain_softmax, plain_arange = torch.Tensor.to, torch.nn.functional.softmax, torch.arange
        plain_tensor = torch.tensor  # LongRoPE's factors: torch.tensor(short_factor, dtype=torch.float32)

        def to(tensor, *args, **kwargs):
            args = tuple(torch.float64 if a is torch.float32 else a for a in args)
            if kwargs.get("dtype") is torch.float32:
                kwargs["dtype"] = torch.float64
            return plain_to(tensor, *args, **kwargs)

        def softmax(x, *args, dtype=None, **kwargs):
            return plain_softmax(x, *args, dtype=torch.float64 if dtype is torch.float32 else dtype, **kwargs)

        def arange(*args, dtype=None, **kwargs):
            return plain_arange(*args, dtype=torch.float64 if dtype is torch.float32 else dtype, **kwargs)

        def tensor(*args, dtype=None, **kwargs):
            return plain_tensor(*args, dtype=torch.float64 if dtype is torch.float32 else dtype, **kwargs)

        torch.set_default_dtype(torch.float64)
        torch.arange = arange
        torch.tensor = tensor
        torch.Tensor.float = lambda tensor, *a, **k: plain_to(tensor, torch.float64)
        torch.Tensor.to = to
        torch.nn.functional.softmax = softmax
        self.plain_type = plain_type = torch.Tensor.type  # DeepSeek-V3's router: x.type(torch.float32)

        def as_type(tensor, dtype=None, *args, **kwargs):
            return plain_type(tensor, torch.float64 if dtype is torch.float32 else dtype, *args, **kwargs)

        torch.Tensor.type = as_type
        self.plain_tensor_softmax = plain_tensor_softmax = torch.Tensor.softmax  # DeepSeek-V2's router

        def tensor_softmax(tensor, *args, dtype=None, **kwargs):
            return plain_tensor_softmax(tensor, *args, dtype=torch.float64 if dtype is torch.float32 else dtype,
                                        **kwargs)  # fmt: skip

        torch.Tensor.softmax = tensor_softmax
        return self

    def __exit__(self, *exc):
        torch = self.torch
        default, torch.Tensor.float, torch.Tensor.to, torch.nn.functional.softmax, torch.arange, torch.tensor = (
            self.saved
        )
        torch.set_default_dtype(default)
        torch.Tensor.type = self.plain_type
        torch.Tensor.softmax = self.plain_tensor_softmax


def float64_twin(transformers, torch, model):
    """The same weights in a model built float64 throughout (see float64_everywhere); use it inside that context."""
    twin = transformers.AutoModelForCausalLM.from_config(model.config, **eager(model.config.model_type),
                                                         dtype=torch.float64)  # fmt: skip
    twin.load_state_dict(model.state_dict())
    return twin.eval()


def ids_for(m: int, seed: int) -> list[int]:
    """m random token ids of the tiny vocabulary (3..1399), the same for every test that gives the seed."""
    import numpy as np

    return [int(i) for i in np.random.default_rng(seed).integers(3, 1400, m)]
