"""The choices of qkv patch (NumPy-free, for the CLI's options): what is patched, the metric, the direction."""

WHAT = ("resid", "attn", "mlp", "heads", "q", "k", "v", "pattern")
METRICS = ("logit-diff", "prob", "kl")
DIRECTIONS = ("denoise", "noise")
