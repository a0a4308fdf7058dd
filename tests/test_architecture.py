"""The parts and their arrows (README, "Architecture"), checked on the source: every import, lazy ones included.

    cli -> api -> views -> pipeline -> models -> text -> core          (and errors.py, files.py: shared by all)
     \\------> views          \\-------------------------------------> core
    (api, the Python API, is what the CLI is a client of: every command computes through it, then renders with views)

Inside models/ and views/, the sub-packages have one way down too (a module may import its own sub-package and those
before it; the modules at the package's root may import every sub-package); imports made for type hints only
(under `if TYPE_CHECKING:`) do not count there:

    models:  quants/ <- formats/ <- layers/ <- families/ <- the root (model, load, catalog, cache, select)
    views:   export/ <- console/ <- figures/ <- page/ <- the root (one module per kind of result, run.py)

Also: no import cycle between modules, no module over 300 lines, no folder of more than 20 modules, no typer,
click, rich or matplotlib below views, and core imports nothing but NumPy and the standard library. Run it alone:
python -m pytest tests/test_architecture.py
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "qkv_cli"
SHARED = {"errors", "files", "__init__", "__main__"}  # root modules every part may import
ALLOWED = {  # part -> the parts it may import (itself included)
    "core": {"core"},
    "text": {"text", "core"},
    "models": {"models", "text", "core"},
    "pipeline": {"pipeline", "models", "text", "core"},
    "views": {"views", "pipeline", "core"},
    "api": {"api", "views", "pipeline", "models", "text", "core"},
    "cli": {"cli", "api", "views"},
}
UI = {"typer", "click", "rich", "matplotlib"}
THIRD_PARTY = {  # part -> third-party packages it may import
    "core": {"numpy", "threadpoolctl"},
    "text": {"numpy", "tokenizers", "pyarrow"},  # pyarrow: a Parquet corpus (qkv scan, the [scan] extra)
    "models": {"numpy", "huggingface_hub"},
    "pipeline": {"numpy", "jinja2", "pyarrow", "ray"},  # qkv scan's shards ([scan]) and its Ray engine ([ray])
    "views": {"numpy", "rich", "matplotlib"},
    "api": {"numpy"},
    "cli": {"typer", "click", "shellingham"},  # shellingham: the shell detection typer itself uses
}
MAX_LINES = 300
MAX_MODULES = 20  # per folder, its __init__.py aside
SUBROOMS = {  # a part's sub-packages, lowest first; "" is the part's own root modules (above them all)
    "models": ("quants", "formats", "layers", "families", ""),
    "views": ("export", "console", "figures", "page", ""),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def part_of(name: str) -> str:
    """The part a qkv_cli module (or a name in it) belongs to; root modules and names are "shared"."""
    pieces = name.split(".")
    return pieces[1] if len(pieces) > 1 and pieces[1] in ALLOWED else "shared"


def imports(path: Path) -> list[tuple[str, int]]:
    """(imported module, line) for every import in the file, at any depth (inside functions too)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            found.append((base, node.lineno))
            found += [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
    return found


def type_only_lines(path: Path) -> set[int]:
    """The lines inside `if TYPE_CHECKING:` blocks (imports for type hints, never run)."""
    lines = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            lines |= {n.lineno for child in node.body for n in ast.walk(child) if hasattr(n, "lineno")}
    return lines


def subroom_of(name: str) -> tuple[str, str] | None:
    """(part, sub-package) of a module of models/ or views/ ("" for the part's root modules), else None."""
    pieces = name.split(".")
    if len(pieces) < 2 or pieces[1] not in SUBROOMS:
        return None
    is_package = (PACKAGE.parent / Path(*pieces) / "__init__.py").is_file()
    inner = pieces[2:] if is_package else pieces[2:-1]
    return pieces[1], inner[0] if inner else ""


def internal_edges() -> dict[str, set[str]]:
    """module -> the qkv_cli modules it imports (a `from pkg import name` counts if name is a module)."""
    known = modules()
    edges = {}
    for name, path in known.items():
        edges[name] = {target for target, _ in imports(path) if target in known and target != name}
    return edges


def test_every_part_imports_only_what_its_arrows_allow():
    bad = []
    for name, path in modules().items():
        part = part_of(name)
        for target, line in imports(path):
            top = target.split(".")[0]
            if top == "qkv_cli":
                other = part_of(target)
                if part != "shared" and other != "shared" and other not in ALLOWED[part]:
                    bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} ({part}) imports {target} ({other})")
            elif part != "shared" and top not in sys.stdlib_module_names and top not in THIRD_PARTY[part]:
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} ({part}) imports {top}")
    assert not bad, "\n".join(bad)


def test_sub_packages_of_models_and_views_import_only_downwards():
    known, bad = modules(), []
    for name, path in known.items():
        here = subroom_of(name)
        if here is None:
            continue
        order = SUBROOMS[here[0]]
        skip = type_only_lines(path)
        for target, line in imports(path):
            there = subroom_of(target) if target in known else None
            if line in skip or there is None or there[0] != here[0] or here[1] == "":
                continue
            if order.index(there[1]) > order.index(here[1]):
                room = lambda r: f"{r[0]}/{r[1]}" if r[1] else f"{r[0]}/ (root)"  # noqa: E731
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} ({room(here)}) imports {target} ({room(there)})")
    assert not bad, "\n".join(bad)


def test_every_sub_room_is_listed():
    """A new sub-package of models/ or views/ gets a place in SUBROOMS (and so an order)."""
    for part, order in SUBROOMS.items():
        found = {p.parent.name for p in (PACKAGE / part).glob("*/__init__.py")}
        assert found == set(order) - {""}, (part, sorted(found))


@pytest.mark.parametrize("folder", sorted({p.parent for p in PACKAGE.rglob("*.py")}), ids=str)
def test_no_folder_over_20_modules(folder):
    count = len([p for p in folder.glob("*.py") if p.name != "__init__.py"])
    assert count <= MAX_MODULES, f"{folder} holds {count} modules (at most {MAX_MODULES}): split it by concern"


def test_the_test_tree_mirrors_the_code_tree():
    """tests/<part>/<sub>/ exists only where qkv_cli/<part>/<sub>/ does, so a module's tests are found by its path."""
    tests = Path(__file__).resolve().parent
    stray = [str(d.relative_to(tests)) for part in ALLOWED for d in (tests / part).rglob("*")
             if d.is_dir() and d.name != "__pycache__" and not (PACKAGE / d.relative_to(tests)).is_dir()]  # fmt: skip
    assert not stray, stray


def test_no_ui_library_below_views():
    below = [name for name, path in modules().items() if part_of(name) not in ("views", "cli")
             for target, _ in imports(path) if target.split(".")[0] in UI]  # fmt: skip
    assert not below, below


def test_shared_root_modules_import_only_the_standard_library_and_errors():
    for name in ("qkv_cli.errors", "qkv_cli.files"):
        for target, _ in imports(modules()[name]):
            top = target.split(".")[0]
            assert top in sys.stdlib_module_names or target.startswith("qkv_cli.errors"), (name, target)


def test_no_import_cycle_between_modules():
    edges = internal_edges()
    state, stack, cycles = {}, [], []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node)
    # a package's __init__ re-exporting its own modules is not a cycle between modules
    cycles = [c for c in cycles if not all(n == c[0].rpartition(".")[0] or n.startswith(c[0] + ".") for n in c[1:])]
    cycles = [c for c in cycles if not any(modules()[n].name == "__init__.py" for n in c)]
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("name", sorted(modules()))
def test_no_module_over_300_lines(name):
    lines = modules()[name].read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_LINES, f"{name} has {lines} lines (at most {MAX_LINES}): split it by what it holds"


def test_the_formula_is_in_core_in_one_step():
    text = (PACKAGE / "core" / "formula.py").read_text(encoding="utf-8")
    assert "Softmax(Q K^T / sqrt(d_k) + Mask) V" in text and "def reference_kernel" in text


def test_the_check_sees_a_forbidden_import(tmp_path, monkeypatch):
    """The checker itself: a views module importing models is reported."""
    fake = tmp_path / "qkv_cli"
    (fake / "views").mkdir(parents=True)
    (fake / "views" / "bad.py").write_text("def f():\n    from qkv_cli.models import load_model\n")
    (fake / "models").mkdir()
    (fake / "models" / "__init__.py").write_text("")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", fake)
    with pytest.raises(AssertionError, match="views/bad.py:2 \\(views\\) imports qkv_cli.models"):
        test_every_part_imports_only_what_its_arrows_allow()
