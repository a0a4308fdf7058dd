"""Reading checkpoints as untrusted files: config.json as a typed ModelConfig, safetensors, GGUF (gguf/), the stores
of other tools, finding a checkpoint, weights read as the pass reaches them. May import models.quants.
"""
