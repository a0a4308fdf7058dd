"""Retrain the small shipped BPE tokenizer from sample_texts/*.txt: `python -m qkv_cli.text.data.build_bpe`.

A GPT-2 style byte-level BPE (a space is spelled "Ġ" inside tokens), so any text can be encoded with no unknown
tokens, yet the vocabulary is small enough that rare words split into several subword pieces. Training is
deterministic: the same sample texts give a byte-identical bpe_tokenizer.json.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

VOCAB_SIZE = 1500
MIN_FREQUENCY = 2
SPECIAL_TOKENS = ["<|endoftext|>"]
OUTPUT = Path(__file__).parent / "bpe_tokenizer.json"


def build(texts: list[str], vocab_size: int = VOCAB_SIZE):
    """Train a byte-level BPE on `texts` and return the tokenizers.Tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)  # offsets exclude the leading space
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=MIN_FREQUENCY,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return tok


def main(argv: list[str] | None = None) -> None:
    from qkv_cli.text.samples import sample_dir

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab-size", type=int, default=VOCAB_SIZE)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    files = sorted(sample_dir().glob("*.txt"))
    texts = [line for f in files for line in f.read_text(encoding="utf-8").splitlines() if line.strip()]
    tok = build(texts, args.vocab_size)
    args.output.write_text(tok.to_str(pretty=False) + "\n", encoding="utf-8")
    size = args.output.stat().st_size
    print(f"wrote {args.output} ({tok.get_vocab_size()} tokens, {size / 1024:.0f} KB) from {len(files)} files")


if __name__ == "__main__":
    main()
