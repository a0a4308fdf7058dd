"""qkv: inspect Q, K, V and masked multi-head attention from the terminal.

The public API is ``attention`` (NumPy): ``out, weights = attention(Q, K, V, mask=None, scale=None,
kernel="vectorized")``. It is imported on first use so that ``import qkv_cli`` stays light.
"""

__version__ = "0.1.0"
__all__ = ["attention", "__version__"]


def __getattr__(name):
    if name == "attention":
        from qkv_cli.core.kernels import attention

        return attention
    raise AttributeError(f"module 'qkv_cli' has no attribute {name!r}")
