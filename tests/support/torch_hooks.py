"""Forward hooks on transformers' modules, as the activation-patching reference tests place them."""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def hooked(hooks):
    """The hooks (module, "pre" | "post", fn) registered on their modules for the block's duration."""
    handles = [m.register_forward_pre_hook(fn) if kind == "pre" else m.register_forward_hook(fn)
               for m, kind, fn in hooks]  # fmt: skip
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def keeper(seen: dict):
    """keep(key, pre=False): a hook that stores a copy of its module's output (with pre: its first input) in
    seen[key]."""

    def keep(key, pre=False):
        def fn(module, args, out=None):
            value = args[0] if pre else (out[0] if isinstance(out, tuple) else out)
            seen[key] = value.clone()

        return fn

    return keep


def pattern_hooks(v_module, o_module, alpha, cols, v_cols=None) -> list:
    """The hooks of a --what pattern patch: each query's head output z_i = alpha_i V_i, with alpha the clean run's
    weights of the head and V this run's (the v projection's output in columns `v_cols`, default `cols`: with
    grouped key/value heads, the head's group; kept by the first hook; the second writes z into the attention
    output's input, in the head's columns `cols`)."""
    values = {}
    v_cols = cols if v_cols is None else v_cols

    def keep_v(module, args, out):
        values["V"] = out[0, :, v_cols]

    def pattern(module, args):
        z = args[0].clone()
        z[0, :, cols] = alpha @ values["V"]
        return (z, *args[1:])

    return [(v_module, "post", keep_v), (o_module, "pre", pattern)]
