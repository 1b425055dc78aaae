"""Structure rules of the package, checked on its source (issue 4).

(a) No module imports another specreplay module's private (``_x``) name: a name another module
    needs is public and in its ``__all__``.
(b) No function or method is longer than :data:`MAX_FUNCTION_LINES` lines (``def`` line to last
    line, docstring included), except Numba kernels (decorated with ``njit``, ``jit``,
    ``intrinsic`` or ``vectorize``), whose length is bounded by what Numba compiles well.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import specreplay

PACKAGE = Path(specreplay.__file__).parent
MAX_FUNCTION_LINES = 80
KERNEL_DECORATORS = frozenset({"njit", "jit", "intrinsic", "vectorize"})


def _modules() -> Iterator[tuple[str, str, ast.Module]]:
    """(dotted module name, short path name, tree) of every module of the package."""
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).with_suffix("")
        parts = [p for p in rel.parts if p != "__init__"]
        dotted = ".".join(["specreplay", *parts])
        short = "/".join(parts) or "__init__"
        yield dotted, short, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _absolute(module: str, node: ast.ImportFrom) -> str:
    """The absolute module of a ``from … import`` inside ``module`` (relative levels resolved)."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".")[: -node.level]
    return ".".join([*base, *([node.module] if node.module else [])])


def private_imports(module: str, tree: ast.AST) -> list[str]:
    """Uses in ``module`` of another specreplay module's private names, as messages."""
    found: list[str] = []
    aliases: dict[str, str] = {}  # local name -> specreplay module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("specreplay.") and a.asname:
                    aliases[a.asname] = a.name
                elif a.name.startswith("specreplay"):
                    aliases[a.name.split(".")[0]] = "specreplay"
        elif isinstance(node, ast.ImportFrom):
            src = _absolute(module, node)
            if not src.startswith("specreplay"):
                continue
            for a in node.names:
                if src != module and _is_private(a.name):
                    found.append(f"{module}:{node.lineno} imports {src}.{a.name}")
                aliases[a.asname or a.name] = f"{src}.{a.name}"  # may be a submodule
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _is_private(node.attr):
            target = _dotted(node.value, aliases)
            if target is not None and target != module:
                found.append(f"{module}:{node.lineno} uses {target}.{node.attr}")
    return found


def _dotted(node: ast.expr, aliases: dict[str, str]) -> str | None:
    """The specreplay module an expression like ``toy`` or ``specreplay.sim.toy`` names, if any."""
    if isinstance(node, ast.Name):
        return aliases.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, aliases)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _decorator_names(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    names = set()
    for d in fn.decorator_list:
        target = d.func if isinstance(d, ast.Call) else d
        if isinstance(target, ast.Name):
            names.add(target.id)
        elif isinstance(target, ast.Attribute):
            names.add(target.attr)
    return names


def long_functions(short: str, tree: ast.AST, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``path.qualname (n lines)`` of each non-kernel function of ``tree`` over ``limit`` lines."""
    found: list[str] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                qual = f"{prefix}{child.name}"
                assert child.end_lineno is not None
                n = child.end_lineno - child.lineno + 1
                if n > limit and not (_decorator_names(child) & KERNEL_DECORATORS):
                    found.append(f"{short}.{qual} ({n} lines)")
                visit(child, f"{qual}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def test_no_private_names_across_modules() -> None:
    offenders = [msg for dotted, _, tree in _modules() for msg in private_imports(dotted, tree)]
    assert not offenders, "private names used across modules (make them public):\n" + "\n".join(
        offenders
    )


def test_no_long_functions_outside_kernels() -> None:
    offenders = [msg for _, short, tree in _modules() for msg in long_functions(short, tree)]
    assert not offenders, (
        f"functions longer than {MAX_FUNCTION_LINES} lines (split them):\n" + "\n".join(offenders)
    )


PLANTED = """
from specreplay.sim.toy import _fold, draw_cdf
from specreplay.sim import policy
import specreplay.sim.rng as rng
from . import _sibling


def ok() -> None:
    policy._policy_row(1)
    rng._uniform_one(1)
    draw_cdf(1)
    x = object()
    x._private  # not a specreplay module: fine
"""


def test_private_name_check_catches_planted_uses() -> None:
    found = private_imports("specreplay.stats.planted", ast.parse(PLANTED))
    assert found == [
        "specreplay.stats.planted:2 imports specreplay.sim.toy._fold",
        "specreplay.stats.planted:5 imports specreplay.stats._sibling",
        "specreplay.stats.planted:9 uses specreplay.sim.policy._policy_row",
        "specreplay.stats.planted:10 uses specreplay.sim.rng._uniform_one",
    ]


def test_long_function_check_catches_a_planted_function() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(80))
    planted = (
        f"def long_one():\n{body}\n\n"  # 81 lines
        f"@njit(cache=True)\ndef kernel():\n{body}\n\n"  # exempt
        f"class A:\n    def method(self):\n    {body.replace(chr(10), chr(10) + '    ')}\n"
    )
    assert long_functions("planted", ast.parse(planted)) == [
        "planted.long_one (81 lines)",
        "planted.A.method (81 lines)",
    ]
