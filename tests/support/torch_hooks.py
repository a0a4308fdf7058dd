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
