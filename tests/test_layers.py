"""The import contracts cover every command module (a new verb cannot slip past them)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_independence_contract_lists_every_command() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    independent = next(c for c in contracts if c["type"] == "independence")
    modules = {
        f"specreplay.commands.{p.stem}"
        for p in (ROOT / "specreplay" / "commands").glob("*.py")
        if p.stem != "__init__"
    }
    assert set(independent["modules"]) == modules


def test_layers_contract_names_every_subpackage() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    layers = next(c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers")[
        "layers"
    ]
    packages = {
        f"specreplay.{p.name}"
        for p in (ROOT / "specreplay").iterdir()
        if p.is_dir() and (p / "__init__.py").exists()
    }
    named = {m.strip() for layer in layers for m in layer.split("|")}
    assert packages <= named
    assert [m.strip() for m in layers[0].split("|")] == ["specreplay.cli", "specreplay.api"]


def test_no_import_cycles() -> None:
    """No two modules import each other, directly or through others (function-level imports
    included): strongly connected components of the import graph are single modules."""
    import grimp  # comes with import-linter (dev extra)

    graph = grimp.build_graph("specreplay")
    modules = sorted(graph.modules)
    reach: dict[str, set[str]] = {}
    for m in modules:
        seen: set[str] = set()
        todo = [m]
        while todo:
            for nxt in graph.find_modules_directly_imported_by(todo.pop()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        reach[m] = seen
    cycles = sorted(m for m in modules if m in reach[m])
    assert not cycles, f"modules on an import cycle: {cycles}"


def test_renderers_are_forbidden_every_layer_but_results() -> None:
    """render/ reads typed results only: the forbidden contract names every other subpackage and
    front end, so a renderer cannot reach back into the replay, the statistics or the assembly."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    render = next(c for c in contracts if c["type"] == "forbidden")
    assert render["source_modules"] == ["specreplay.render"]
    packages = {
        f"specreplay.{p.name}"
        for p in (ROOT / "specreplay").iterdir()
        if p.is_dir() and (p / "__init__.py").exists()
    }
    allowed = {"specreplay.render", "specreplay.results"}
    assert set(render["forbidden_modules"]) == (packages - allowed) | {
        "specreplay.cli",
        "specreplay.api",
    }


def test_runtime_package_never_imports_the_testing_package() -> None:
    """specreplay_testing (live truth) sits outside the runtime package and is not shipped."""
    import grimp

    graph = grimp.build_graph("specreplay", "specreplay_testing", cache_dir=None)  # never stale
    assert "specreplay_testing.livetruth" in graph.modules
    importers = {
        m
        for t in graph.find_children("specreplay_testing") | {"specreplay_testing"}
        for m in graph.find_modules_that_directly_import(t)
    }
    assert not {m for m in importers if m.split(".")[0] == "specreplay"}
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert config["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"] == ["specreplay"]
