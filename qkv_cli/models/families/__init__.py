"""One module per family (config.json keys to typed options, tensor names to layers) and the registry (model_type ->
module). The shared RoPE decoder is decoder/, the encoder-decoders encdec/. May import models.layers,
models.formats and models.quants.
"""
