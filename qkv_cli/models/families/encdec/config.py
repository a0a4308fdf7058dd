"""What an encoder-decoder's config.json adds to ModelConfig (whose n_layers, n_heads, d_ff are the encoder's)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EncDecOptions:
    dec_layers: int  # L_dec
    dec_heads: int  # the decoder's tau (self- and cross-attention)
    start: int  # decoder_start_token_id: what the decoder reads first
    dec_positions: int  # the longest decoder input
    dec_positions_key: str = "max_position_embeddings"
    dec_ff: int = 0  # the decoder's d_ff (BART, Marian); 0: the encoder's
    gated: bool = False  # T5 v1.1: gated feed-forward
    buckets: int = 32  # T5: relative_attention_num_buckets
    max_distance: int = 128  # T5: relative_attention_max_distance
    scale_head: bool = False  # T5 v1.0: X d^-0.5 before the tied head
    embed_scale: float = 1.0  # Marian / scale_embedding: sqrt(d)
    learned_positions: bool = True  # BART: a learned table at offset 2; Marian: sinusoids
    dec_d_k: int = 0  # the decoder's d_k (T5: d_kv, as the encoder's); 0: d / dec_heads (BART, Marian)
    scaled: bool = True  # scores divided by sqrt(d_k); T5 adds its position bias instead
