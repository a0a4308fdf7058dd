"""`--chat`: the text wrapped in a chat template, rendered with jinja2 as transformers' apply_chat_template does.

The template comes from `--chat-template FILE`, else the model folder's tokenizer_config.json (`chat_template`) or
a GGUF file's `tokenizer.chat_template`. It is untrusted text: read from a regular file of bounded size, run in
jinja2's immutable sandbox. The messages are [system?, user]: `--system TEXT` puts a system message first,
`--no-system` an empty one (so a template that writes a default system prompt when none is given writes none),
neither: the user message alone (the template may add its own default, as SmolLM2's does).
Every command that reads text with a checkpoint tokenizes through `prompt()`, so --chat means the same on all.
"""

from __future__ import annotations

from dataclasses import dataclass

from qkv_cli.errors import QkvError

MAX_TEMPLATE = 256 * 1024  # characters of a template (the largest published ones are about 20 kB)


@dataclass(frozen=True)
class Chat:
    """What --chat, --system, --no-system and --chat-template ask for."""

    system: str | None = None  # a system message's content; "" with no_system
    no_system: bool = False
    template_file: str | None = None

    def __post_init__(self):
        if self.no_system and self.system:
            raise QkvError("--system and --no-system contradict each other: give one")

    def messages(self, text: str) -> list[dict]:
        user = {"role": "user", "content": text}
        if self.no_system:
            return [{"role": "system", "content": ""}, user]
        return [user] if self.system is None else [{"role": "system", "content": self.system}, user]


@dataclass(frozen=True)
class Prompt:
    """The tokens a checkpoint reads for one text, and (with --chat) what the template put around it."""

    tokens: object  # text.tokens.Tokens
    rendered: str = ""  # the template's output ("" without --chat)
    source: str = ""  # where the template came from
    before: str = ""  # what the template wrote before TEXT
    after: str = ""  # ... and after it
    n_before: int = 0  # tokens wholly before TEXT
    n_after: int = 0  # tokens wholly after it
    found: bool = True  # TEXT appears verbatim in the rendered template
    chat: Chat | None = None


def prompt(model, text: str, chat: Chat | None = None) -> Prompt:
    """The model's tokens for `text`: its own special tokens, or (with chat) the rendered template's, unchanged."""
    if chat is None:
        return Prompt(model.tokenize(text))
    template, source = template_of(model, chat.template_file)
    rendered = render(template, chat.messages(text), specials(model), model.name)
    tokens = model.tokenize(rendered, special=False)  # the template writes the special tokens itself
    start = rendered.find(text)
    if start < 0:  # a template that trims or rewrites the content
        return Prompt(tokens, rendered, source, found=False, chat=chat)
    end = start + len(text)
    offsets = tokens.offsets
    n_before = sum(1 for _, b in offsets if b <= start)
    n_after = sum(1 for a, _ in offsets if a >= end)
    return Prompt(tokens, rendered, source, rendered[:start], rendered[end:], n_before, n_after, True, chat)


def template_of(model, path: str | None = None) -> tuple[str, str]:
    """(template, where it came from): --chat-template FILE, else the model's own, else an error saying so."""
    if path is not None:
        from pathlib import Path

        from qkv_cli.files import read_regular

        data = read_regular(Path(path).expanduser(), 4 * MAX_TEMPLATE, "chat template")
        try:
            template = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise QkvError(f"chat template '{path}' is not UTF-8 text (bad byte at offset {exc.start})") from None
        return _checked(template, f"chat template '{path}'"), f"the template in {path}"
    template = model.metadata.get("tokenizer.chat_template")
    if template is None and model.path.is_dir() and (model.path / "tokenizer_config.json").exists():
        from qkv_cli.files import read_json

        doc = read_json(model.path / "tokenizer_config.json", 16 * 2**20, what="tokenizer config")
        template = doc.get("chat_template") if isinstance(doc, dict) else None
    if isinstance(template, list):  # several named templates: the default one
        template = next((t.get("template") for t in template if isinstance(t, dict) and t.get("name") == "default"),
                        None)  # fmt: skip
    if not isinstance(template, str) or not template.strip():
        raise QkvError(f"{model.name} has no chat template (tokenizer_config.json chat_template or GGUF "
                       "tokenizer.chat_template): give one with --chat-template FILE, or drop --chat")  # fmt: skip
    return _checked(template, f"{model.name}'s chat template"), f"{model.name}'s own template"


def _checked(template: str, what: str) -> str:
    if len(template) > MAX_TEMPLATE:
        raise QkvError(f"{what} is {len(template)} characters: at most {MAX_TEMPLATE}")
    if not template.strip():
        raise QkvError(f"{what} is empty")
    return template


def render(template: str, messages: list[dict], special: dict, name: str = "the model") -> str:
    """The messages through the template, with the generation prompt added (add_generation_prompt=True)."""
    try:
        from jinja2 import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise QkvError("--chat needs jinja2: pip install 'qkv-cli[chat]'") from None

    def raise_exception(message):
        raise TemplateError(message)

    limit = 64 * MAX_TEMPLATE

    class Bounded(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset(["*", "**"])

        def call_binop(self, context, operator, left, right):  # "x" * 10**12 is refused before it is built
            if operator == "**" and isinstance(right, int) and abs(right) > 64:
                raise TemplateError(f"{left!r} ** {right} is refused: exponents up to 64")
            if operator == "*" and any(isinstance(x, str | list | tuple) for x in (left, right)):
                count, seq = (right, left) if isinstance(left, str | list | tuple) else (left, right)
                if isinstance(count, int) and len(seq) * count > limit:
                    raise TemplateError(f"a repetition of {len(seq) * count} items is refused: at most {limit}")
            return super().call_binop(context, operator, left, right)

    env = Bounded(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = raise_exception
    pieces, size = [], 0
    try:  # streamed, so that a template writing without end is stopped at `limit` characters
        for piece in env.from_string(template).generate(messages=messages, add_generation_prompt=True, **special):
            size += len(piece)
            if size > limit:
                raise QkvError(f"the chat template of {name} writes more than {limit} characters: refused")
            pieces.append(piece)
    except TemplateError as exc:
        raise QkvError(f"the chat template of {name} failed: {exc}") from None
    except (RecursionError, MemoryError, TypeError, ValueError, LookupError, AttributeError) as exc:
        raise QkvError(f"the chat template of {name} failed: {type(exc).__name__}") from None
    return "".join(pieces)


def specials(model) -> dict:
    """bos_token and eos_token as strings, for templates that write them."""
    out = {}
    meta = model.metadata
    if meta:
        tokens = meta.get("tokenizer.ggml.tokens") or []
        for name in ("bos", "eos"):
            i = meta.get(f"tokenizer.ggml.{name}_token_id")
            if isinstance(i, int) and 0 <= i < len(tokens):
                out[f"{name}_token"] = tokens[i]
        return out
    if (model.path / "tokenizer_config.json").exists():
        from qkv_cli.files import read_json

        doc = read_json(model.path / "tokenizer_config.json", 16 * 2**20, what="tokenizer config")
        for name in ("bos_token", "eos_token"):
            value = doc.get(name) if isinstance(doc, dict) else None
            value = value.get("content") if isinstance(value, dict) else value
            if isinstance(value, str):
                out[name] = value
    return out
