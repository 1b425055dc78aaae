"""Issue 16, item 9: the package imports no private module of a third-party package.

A private module or name is a dotted component that starts with ``_`` (``typer._click``,
``from typer import _click``, ``typer._coercion.build_runtime_param``); dunders
(``__version__``) are public. The project's own modules (``specreplay._x``, relative imports),
the standard library's (``_thread``) and ``__future__`` are not third-party. The scan reads
every ``specreplay/**/*.py`` with :mod:`ast`: ``import``, ``from … import`` and
``importlib.import_module("…")`` with a constant name; a private module imported some other way
(``__import__``, a computed name) is not seen.

A private module changes without notice between releases: typer 0.29 moved click into
``typer._click`` and its coercion into ``typer._coercion``, and ``commands/cliparse.py`` imported
both until this test.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOT_THIRD_PARTY = frozenset(sys.stdlib_module_names) | {"specreplay", "__future__"}


def _private(dotted: str) -> bool:
    """Whether a dotted name has a private component (``_x``, not a dunder ``__x__``)."""
    return any(
        part.startswith("_") and not (part.startswith("__") and part.endswith("__"))
        for part in dotted.split(".")
    )


def _imported(node: ast.AST) -> list[str]:
    """The dotted names an import node brings in (``from a import b`` gives ``a.b``)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [f"{node.module}.{a.name}" for a in node.names if a.name != "*"] or [node.module]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "import_module"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "importlib"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ):
        return [node.args[0].value]
    return []


def private_imports(source: str) -> list[str]:
    """The third-party private names ``source`` imports, in the order they appear."""
    found = []
    for node in ast.walk(ast.parse(source)):
        for name in _imported(node):
            if name.split(".")[0] not in NOT_THIRD_PARTY and _private(name):
                found.append(name)
    return found


def test_the_scan_sees_each_spelling_of_a_private_import() -> None:
    source = "\n".join(
        [
            "from typer import _click as click",
            "from typer._click.exceptions import UsageError",
            "import typer._coercion",
            "from click import _compat",
            "importlib.import_module('polars._utils')",
            "def f():",
            "    from typer._coercion import build_runtime_param",  # inside a function too
        ]
    )
    assert private_imports(source) == [
        "typer._click",
        "typer._click.exceptions.UsageError",
        "typer._coercion",
        "click._compat",
        "polars._utils",
        "typer._coercion.build_runtime_param",
    ]


def test_the_scan_leaves_public_own_and_standard_library_names() -> None:
    source = "\n".join(
        [
            "from __future__ import annotations",
            "import _thread",
            "from collections import _sentinel",
            "from specreplay._private import x",
            "from . import _helpers",
            "from numpy import __version__",
            "import typer.core",
            "from typer.core import TyperGroup",
            "importlib.import_module('pyarrow.parquet')",
        ]
    )
    assert private_imports(source) == []


def test_the_package_imports_no_private_third_party_module() -> None:
    found = {
        str(path.relative_to(ROOT)): names
        for path in sorted((ROOT / "specreplay").rglob("*.py"))
        if (names := private_imports(path.read_text(encoding="utf-8")))
    }
    assert found == {}, f"private modules of other packages (use their public API): {found}"
