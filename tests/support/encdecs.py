"""Tiny random encoder-decoders (T5, T5 v1.1, BART, Marian) built and saved by transformers, for the tests.

Weights are scaled up (N(0, 0.3); norm weights around 1) so attention is peaked; each folder gets a word-level
tokenizer.json with the family's own special tokens (T5: </s> after the text; BART: <s> ... </s>; Marian: </s>).
"""

from __future__ import annotations

import json

WORDS = "the cat sat on mat a dog ran far and then it slept . , ! le chat est assis sur tapis un chien".split()
SPECIALS = {  # family -> (special tokens in id order, template of a single text)
    "t5": (["<pad>", "</s>", "<unk>"], "$A </s>"),
    "bart": (["<s>", "<pad>", "</s>", "<unk>"], "<s> $A </s>"),
    "marian": (["</s>", "<unk>", "<pad>"], "$A </s>"),
}
VOCAB = 48
CASES = {  # name -> (model_type, config keys)
    "t5": ("t5", {"d_model": 32, "d_kv": 6, "d_ff": 40, "num_layers": 2, "num_decoder_layers": 3, "num_heads": 4,
                  "relative_attention_num_buckets": 8, "relative_attention_max_distance": 12,
                  "decoder_start_token_id": 0, "pad_token_id": 0, "eos_token_id": 1}),
    "t5-v1.1": ("t5", {"d_model": 32, "d_kv": 8, "d_ff": 40, "num_layers": 2, "num_heads": 4,
                       "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False,
                       "relative_attention_num_buckets": 6, "relative_attention_max_distance": 9,
                       "decoder_start_token_id": 0, "pad_token_id": 0, "eos_token_id": 1}),
    "mt5": ("mt5", {"d_model": 32, "d_kv": 8, "d_ff": 36, "num_layers": 2, "num_decoder_layers": 2, "num_heads": 4,
                    "relative_attention_num_buckets": 8, "relative_attention_max_distance": 10,
                    "decoder_start_token_id": 0, "pad_token_id": 0, "eos_token_id": 1}),
    "umt5": ("umt5", {"d_model": 32, "d_kv": 8, "d_ff": 36, "num_layers": 2, "num_decoder_layers": 3, "num_heads": 4,
                      "relative_attention_num_buckets": 8, "relative_attention_max_distance": 10,
                      "decoder_start_token_id": 0, "pad_token_id": 0, "eos_token_id": 1}),
    "bart": ("bart", {"d_model": 32, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
                      "decoder_attention_heads": 2, "encoder_ffn_dim": 40, "decoder_ffn_dim": 36,
                      "max_position_embeddings": 24, "bos_token_id": 0, "pad_token_id": 1, "eos_token_id": 2,
                      "decoder_start_token_id": 2, "forced_eos_token_id": None, "scale_embedding": True}),
    "marian": ("marian", {"d_model": 32, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
                          "decoder_attention_heads": 4, "encoder_ffn_dim": 40, "decoder_ffn_dim": 40,
                          "max_position_embeddings": 24, "pad_token_id": 2, "eos_token_id": 0,
                          "decoder_start_token_id": 2, "forced_eos_token_id": None, "decoder_vocab_size": VOCAB}),
}  # fmt: skip


def write_tokenizer(folder, family: str) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    specials, template = SPECIALS[family]
    vocab = {w: i for i, w in enumerate(specials + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single=template, special_tokens=[(s, vocab[s]) for s in specials if s in template]
    )
    tok.save(str(folder / "tokenizer.json"))


def build(transformers, torch, name: str, folder, seed: int = 0):
    """Save a tiny random model of case `name` with its tokenizer.json to folder; return the transformers model
    ("translator": the tiny trained T5 of `translator`)."""
    if name == "translator":
        return translator(transformers, torch, folder)
    model_type, keys = CASES[name]
    torch.manual_seed(seed)
    config = transformers.AutoConfig.for_model(model_type, vocab_size=VOCAB, **keys)
    model = transformers.AutoModelForSeq2SeqLM.from_config(config, attn_implementation="eager")
    std = {"t5": 0.2, "mt5": 0.2, "umt5": 0.2, "marian": 0.5}.get(
        model_type, 0.3
    )  # T5 does not divide by sqrt(d_k): smaller weights, as peaked
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if "embed_positions" in pname:
                continue  # Marian's sinusoids, BART's learned table: as built
            base = 1.0 if ("norm" in pname and "weight" in pname) else 0.0
            p.copy_(torch.randn_like(p) * (std if base == 0.0 else 0.2) + base)
    model.eval()
    model.generation_config.forced_eos_token_id = None
    model.save_pretrained(folder, safe_serialization=True)
    write_tokenizer(folder, "t5" if model_type in ("mt5", "umt5") else model_type)
    return model


def edit_config(folder, **changes) -> None:
    path = folder / "config.json"
    raw = json.loads(path.read_text())
    raw.update(changes)
    path.write_text(json.dumps(raw))


def reference(torch, model, source_ids, decoder_ids) -> dict:
    """transformers' eager attentions, teacher-forced: encoder (L, tau, n, n), decoder (L, tau, m, m), cross."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([source_ids]), decoder_input_ids=torch.tensor([decoder_ids]),
                    output_attentions=True)  # fmt: skip
    return {"encoder": [a[0].numpy() for a in out.encoder_attentions],
            "decoder": [a[0].numpy() for a in out.decoder_attentions],
            "cross": [a[0].numpy() for a in out.cross_attentions], "logits": out.logits[0].numpy()}  # fmt: skip


ANIMALS = {"cat": "chat", "dog": "chien", "horse": "cheval", "mouse": "souris"}
VERBS = {"is sleeping": "dort", "is eating": "mange", "is running": "court"}
ARTICLES = {"The": "Le", "A": "Un"}


def translations() -> list[tuple[str, str]]:
    """The 24 sentence pairs tiny-translator learns: "translate English to French: The cat is sleeping." ->
    "Le chat dort." for each article, animal and verb."""
    import itertools

    return [(f"translate English to French: {a} {b} {c}.", f"{x} {y} {z}.") for (a, x), (b, y), (c, z) in
            itertools.product(ARTICLES.items(), ANIMALS.items(), VERBS.items())]  # fmt: skip


def translator(transformers, torch, folder, steps: int = 150):
    """tiny-translator: a T5 (one encoder layer, one decoder layer, two heads, d 32) trained by transformers in
    float64, one thread, seed 0, full-batch Adam (lr 3e-3) for `steps` steps on the 24 pairs of translations(), and
    saved with a word-level tokenizer.json; a toy that translates its own sentences (a few seconds of training)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    pairs = translations()
    split = pre_tokenizers.Whitespace()
    words = sorted({w for s, t in pairs for w, _ in split.pre_tokenize_str(f"{s} {t}")})
    vocab = {w: i for i, w in enumerate(["<pad>", "</s>", "<unk>", *words])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = split
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one summation order, the same numbers on every run
    try:
        torch.manual_seed(0)
        config = transformers.T5Config(vocab_size=len(vocab), d_model=32, d_kv=8, d_ff=64, num_layers=1,
                                       num_decoder_layers=1, num_heads=2, relative_attention_num_buckets=8,
                                       relative_attention_max_distance=16, dropout_rate=0.0,
                                       decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)  # fmt: skip
        model = transformers.T5ForConditionalGeneration(config).double()
        source = torch.tensor([tok.encode(s).ids for s, _ in pairs])
        target = torch.tensor([tok.encode(t).ids for _, t in pairs])
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
        for _ in range(steps):
            loss = model(input_ids=source, labels=target).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:
        torch.set_num_threads(threads)
    model.eval()
    model.save_pretrained(folder, safe_serialization=True)
    tok.save(str(folder / "tokenizer.json"))
    return model
