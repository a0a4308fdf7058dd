"""The sample texts shipped with qkv: found in a source checkout and in an installed wheel."""

from __future__ import annotations

from pathlib import Path

from qkv_cli.errors import QkvError

__all__ = ["DEFAULT_SAMPLE", "default_text", "sample_dir", "sample_names", "sample_path", "sample_text"]

DEFAULT_SAMPLE = "coreference"


def sample_dir() -> Path:
    """The sample_texts folder: `qkv_cli/sample_texts` in a wheel, `<repo>/sample_texts` in a checkout."""
    here = Path(__file__).resolve().parent.parent  # the qkv_cli package
    for candidate in (here / "sample_texts", here.parent / "sample_texts"):
        if candidate.is_dir():
            return candidate
    raise QkvError(f"the sample_texts folder is missing (looked in '{here}' and '{here.parent}'): reinstall qkv-cli")


def sample_names() -> list[str]:
    """Names accepted by sample_text(), sorted: the .txt files without their suffix."""
    return sorted(p.stem for p in sample_dir().glob("*.txt"))


def sample_path(name: str = DEFAULT_SAMPLE) -> Path:
    """The file of sample `name` ("coreference", "long", ...; a trailing .txt is allowed)."""
    stem = name.removesuffix(".txt")
    path = sample_dir() / f"{stem}.txt"
    if "/" in stem or "\\" in stem or not path.is_file():
        raise QkvError(f"unknown sample '{name}': use one of {', '.join(sample_names())}")
    return path


def sample_text(name: str = DEFAULT_SAMPLE) -> str:
    """The text of sample `name` ("coreference", "long", ...; a trailing .txt is allowed), without trailing space."""
    return sample_path(name).read_text(encoding="utf-8").rstrip()


def default_text() -> str:
    """The text `qkv heatmap` uses when given none: the first line of coreference.txt."""
    return sample_text(DEFAULT_SAMPLE).splitlines()[0].strip()
