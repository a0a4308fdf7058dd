"""mkdocs hook: expand `<!-- qkv-reference: NAME -->` into the command's options, generated from the CLI itself."""

from qkv_cli.cli.reference import expand


def on_page_markdown(markdown, page, config, files):
    return expand(markdown)
