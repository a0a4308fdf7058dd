"""The computing parts every family shares: norms, linear maps and activations, attention, RoPE, multi-head latent
attention, the mixture of experts, the encoder-decoder sub-layers, and their typed options. May import
models.formats and models.quants.
"""
