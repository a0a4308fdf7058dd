"""Giving a command its option sets, and the one policy on what a checkpoint fixes.

`@takes(RANDOM, MASKS, ...)` adds the sets' options to a command's signature; the command receives them as one
`opts: Opts` (attribute access, plus `explicit`: the names given on the command line rather than defaulted).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping

import typer

from qkv_cli.errors import QkvError


class Opts(Mapping):
    """The shared options of one command invocation: option name -> value (read also as attributes, opts.layer),
    and `explicit`, the names given on the command line. api.arguments.request turns it into the Request."""

    def __init__(self, values: Mapping, explicit: frozenset):
        self._values, self.explicit = dict(values), frozenset(explicit)

    def __getattr__(self, name):
        try:
            return self.__dict__["_values"][name]
        except KeyError:
            raise AttributeError(name) from None

    def __getitem__(self, name):
        return self._values[name]

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def check_checkpoint_policy(opts: Opts) -> None:
    """With --model, options the checkpoint fixes are errors; without it, --layer and --download are."""
    from qkv_cli.api.arguments import check_checkpoint_policy as check

    check(opts, opts.explicit)


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
    """The pipeline Request these options describe (qkv_cli.api.arguments.request: the one the Python API uses)."""
    from qkv_cli.api.arguments import request as build

    return build(opts, text, default, **extra)


def chat_options(opts: Opts):
    """--chat, --system, --no-system, --chat-template as one pipeline.chat.Chat (None: none of them given)."""
    from qkv_cli.api.arguments import chat_of

    return chat_of(opts)


def parse_show(show: str, choices) -> list[str]:
    names = [s.strip().lower() for s in show.split(",") if s.strip()]
    bad = [s for s in names if s not in choices]
    if bad or not names:
        raise QkvError(f"--show {show!r} is not valid: use a comma list of {', '.join(choices)}")
    return list(dict.fromkeys(names))


def parse_heads(head: list[int] | None, tau: int) -> list[int]:
    from qkv_cli.api.choices import MAX_WIDTH

    if tau > MAX_WIDTH:  # Settings refuses it too; here, before a list of tau heads is built
        raise QkvError(f"tau ({tau}) is too large: at most {MAX_WIDTH}")
    if not head:
        return list(range(tau))
    bad = [j for j in head if not 0 <= j < tau]
    if bad:
        raise QkvError(f"--head {bad[0]} does not exist: heads are numbered 0..{tau - 1}")
    return list(dict.fromkeys(head))


def sample(name: str | None = None) -> str:
    from qkv_cli.api.arguments import sample_text

    return sample_text(name)


def noted(result):
    """The result, after one line on stderr saying what --chat's template added (views.console.chat)."""
    from qkv_cli.views.console.chat import note

    note(result)
    return result


def prepare(req, head):
    """Load the checkpoint (if any) and check --head against its heads, before the text is run."""
    from qkv_cli.api.commands import load_for

    model = load_for(req)
    tau = req.settings.tau if model is None else model.config.n_heads
    if model is not None and model.is_encoder_decoder:  # the heads of the attention shown
        tau = model.n_heads(req.encdec.attention or "cross")
    return model, parse_heads(head, tau)


def check_outputs(save_npz=None, image=None, page=None) -> None:
    """Before any work: the NPZ, the figure and the page can be written where they were asked for."""
    if save_npz is not None:
        from qkv_cli.views.export.writing import check_output_path

        check_output_path(save_npz)
    if image is not None:
        from qkv_cli.views.figures.heatmaps import check_image_path

        check_image_path(image)
    if page is not None:
        from qkv_cli.views.page.html import check_page_path

        check_page_path(page)
