"""Giving a command its option sets, and the one policy on what a checkpoint fixes.

`@takes(RANDOM, MASKS, ...)` adds the sets' options to a command's signature; the command receives them as one
`opts: Opts` (attribute access, plus `explicit`: the names given on the command line rather than defaulted).
"""

from __future__ import annotations

import functools
import inspect

import typer

from qkv_cli.errors import QkvError

# options that describe the random-weights model or its inputs: a checkpoint fixes them (one policy, every command)
FIXED_BY_CHECKPOINT = {
    "d": "--d", "tau": "--heads", "positions": "--positions", "projection": "--projection", "tokenizer": "--tokenizer",
    "kv_heads": "--kv-heads", "context": "--context", "context_file": "--context-file", "mask_file": "--mask-file",
    "ablate": "--ablate", "causal": "--causal", "window": "--window", "scale": "--scale", "pad_to": "--pad-to",
    "n": "--n", "batch": "--batch",
}  # fmt: skip
NEEDS_CHECKPOINT = {"layer": "chooses a layer of", "download": "fetches", "generate": "lets a decoder write with",
                    "predict": "reads the output head of", "logit_lens": "reads the output head of",
                    "chat": "uses the chat template of"}  # fmt: skip


class Opts:
    """The shared options of one command invocation."""

    def __init__(self, values: dict, explicit: frozenset):
        self.__dict__.update(values)
        self.explicit = explicit

    def get(self, name, default=None):
        return self.__dict__.get(name, default)


def check_checkpoint_policy(opts: Opts) -> None:
    """With --model, options the checkpoint fixes are errors; without it, --layer and --download are."""
    if opts.get("model") is None:
        for name, what in NEEDS_CHECKPOINT.items():
            if name in opts.explicit:
                flag = "--" + name.replace("_", "-")
                raise QkvError(f"{flag} needs --model: it {what} a real checkpoint (see qkv models)")
        return
    clash = [flag for name, flag in FIXED_BY_CHECKPOINT.items() if name in opts.explicit]
    if clash:
        raise QkvError(
            f"{clash[0]} cannot be used with --model: the checkpoint fixes d, the heads, the tokenizer and its mask"
        )


def takes(*sets, **defaults):
    """Give a command the options of `sets` (lists of (name, annotation, default)); defaults override per command."""
    options = [opt for group in sets for opt in group]

    def decorate(func):
        sig = inspect.signature(func)
        own = [p for p in sig.parameters.values() if p.name != "opts"]
        shared = [
            inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=defaults.get(n, v), annotation=a)
            for n, a, v in options
        ] + [inspect.Parameter("qkv_context", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)]

        @functools.wraps(func)
        def wrapper(**kwargs):
            ctx = kwargs.pop("qkv_context")
            given = set()
            for name in [n for n, _, _ in options] + [p.name for p in own]:
                source = ctx.get_parameter_source(name)
                if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
                    given.add(name)
            values = {name: kwargs.pop(name) for name, _, _ in options}
            values.update({p.name: kwargs[p.name] for p in own if p.name in kwargs})  # visible to the policy too
            opts = Opts(values, frozenset(given))
            check_checkpoint_policy(opts)
            return func(opts=opts, **kwargs)

        wrapper.__signature__ = sig.replace(parameters=own + shared)
        wrapper.__annotations__ = {p.name: p.annotation for p in own + shared}
        return wrapper

    return decorate


def request(opts: Opts, text, default=None, **extra):
    """The pipeline Request these options describe (Settings checked at construction)."""
    from qkv_cli.core.budget import parse_size
    from qkv_cli.core.settings import Settings
    from qkv_cli.pipeline.request import Request

    def value(name, fallback=None):
        v = opts.get(name, fallback)
        return getattr(v, "value", v)

    settings = Settings(
        d=value("d", 512), tau=value("tau", 8), seed=value("seed", 0), kernel=value("kernel", "vectorized"),
        causal=value("causal", False), window=value("window"), scale=value("scale", "auto"),
        positions=value("positions", "sinusoidal"), projection=value("projection", "random"),
        dtype=value("dtype", "float64"), tokenizer=value("tokenizer", "word"), kv_heads=value("kv_heads"),
        ablate=value("ablate"), ablate_with=value("ablate_with", "zeros"),
    )  # fmt: skip
    max_memory = opts.get("max_memory")
    fields = dict(
        text=text, file=opts.get("file"), default=default, settings=settings, context=opts.get("context"),
        context_file=opts.get("context_file"), mask_file=opts.get("mask_file"), model=opts.get("model"),
        layers=tuple(opts.get("layer") or ()), download=bool(opts.get("download")),
        max_memory=None if max_memory is None else parse_size(max_memory), generate=opts.get("generate") or 0,
        temperature=opts.get("temperature", 0.0), top_k=opts.get("top_k", 0), sample_seed=value("seed", 0),
        chat=bool(opts.get("chat")), predict=bool(opts.get("predict")), logit_lens=bool(opts.get("logit_lens")),
    )  # fmt: skip
    return Request(**(fields | extra))


def parse_show(show: str, choices) -> list[str]:
    names = [s.strip().lower() for s in show.split(",") if s.strip()]
    bad = [s for s in names if s not in choices]
    if bad or not names:
        raise QkvError(f"--show {show!r} is not valid: use a comma list of {', '.join(choices)}")
    return list(dict.fromkeys(names))


def parse_heads(head: list[int] | None, tau: int) -> list[int]:
    from qkv_cli.core.settings import MAX_WIDTH

    if tau > MAX_WIDTH:  # Settings refuses it too; here, before a list of tau heads is built
        raise QkvError(f"tau ({tau}) is too large: at most {MAX_WIDTH}")
    if not head:
        return list(range(tau))
    bad = [j for j in head if not 0 <= j < tau]
    if bad:
        raise QkvError(f"--head {bad[0]} does not exist: heads are numbered 0..{tau - 1}")
    return list(dict.fromkeys(head))
