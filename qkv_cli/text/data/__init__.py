"""Data shipped with qkv: the small BPE tokenizer (bpe_tokenizer.json) and the script that rebuilds it."""
