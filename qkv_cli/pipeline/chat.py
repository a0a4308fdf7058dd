"""`--chat`: the prompt wrapped in the checkpoint's own chat template, rendered with jinja2 as transformers does.

The template comes from the model folder's tokenizer_config.json (`chat_template`) or a GGUF file's
`tokenizer.chat_template`. It is untrusted text: it runs in jinja2's immutable sandbox, with a bounded size.
"""

from __future__ import annotations

from qkv_cli.errors import QkvError

MAX_TEMPLATE = 256 * 1024


def template_of(model) -> str:
    """The model's chat template, or an error saying it has none."""
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
                       "tokenizer.chat_template): drop --chat")  # fmt: skip
    if len(template) > MAX_TEMPLATE:
        raise QkvError(f"{model.name}'s chat template is {len(template)} characters: at most {MAX_TEMPLATE}")
    return template


def render(model, prompt: str, special: dict) -> str:
    """The prompt as one user message, with the generation prompt added (add_generation_prompt=True)."""
    try:
        from jinja2 import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise QkvError("--chat needs jinja2: pip install 'qkv-cli[chat]'") from None

    def raise_exception(message):
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    try:
        return env.from_string(template_of(model)).render(
            messages=[{"role": "user", "content": prompt}], add_generation_prompt=True, **special
        )
    except TemplateError as exc:
        raise QkvError(f"{model.name}'s chat template failed: {exc}") from None
    except (RecursionError, MemoryError, TypeError, ValueError) as exc:
        raise QkvError(f"{model.name}'s chat template failed: {type(exc).__name__}") from None


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
