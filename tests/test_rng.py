"""Tests of the named random-number streams of :mod:`specreplay.sim.rng`."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np

import specreplay
from specreplay.sim import rng
from specreplay.sim.rng import (
    START_POSITION,
    START_STREAMS,
    STREAM_BOOTSTRAP,
    STREAM_REQUALIFY_SAMPLE,
    STREAMS,
    STREAMS_PER_REPLICATE,
    request_key,
    uniform_py,
)
from specreplay.sim.synth import SynthConfig, request_start
from specreplay.sim.toy import FAMILIES, VOCAB_SIZE, state_key

PACKAGE = Path(specreplay.__file__).parent
# The functions whose ``stream`` argument selects a stream: (name, index of the positional stream
# argument). ``stream_bits(base, counter)`` takes no stream id (its base comes from uniform_bits,
# which does), so only its name is listed, to document that it was considered.
STREAM_ARG = {"uniform": 4, "uniform_bits": 4, "uniform_py": 4, "stream_bits": None}


def test_stream_ids_are_distinct_within_each_registry() -> None:
    assert len(set(STREAMS.values())) == len(STREAMS)
    assert len(set(START_STREAMS.values())) == len(START_STREAMS)


def test_stream_ids_keep_their_historical_values() -> None:
    # Pinned: changing an id moves every figure drawn from it (archives, bootstraps, samples).
    assert STREAMS == {
        "draft": 0,
        "accept": 1,
        "residual": 2,
        "bootstrap": 7,
        "requalify-sample": 11,
        "law-positions": (1 << 62) + 3,
        "live-rounds": (1 << 62) + 7,
        "live-replay-seed": (1 << 62) + 11,
        "live-starts": (1 << 62) + 15,
    }
    assert START_STREAMS == {
        "start-family": 0,
        "start-context": 1,
        "start-token1": 2,
        "start-token2": 3,
    }


def test_position_zero_draws_do_not_share_a_stream() -> None:
    # The starting-state draws, the bootstrap and the requalify sample all draw at position 0.
    assert START_POSITION == 0
    at_zero = [*START_STREAMS.values(), STREAM_BOOTSTRAP, STREAM_REQUALIFY_SAMPLE]
    assert len(set(at_zero)) == len(at_zero)


def test_keyed_draws_are_outside_the_monte_carlo_replicates() -> None:
    # Replicate m uses STREAMS_PER_REPLICATE·m + {draft, accept}: residue 0 or 1 mod 4.
    uses = {STREAMS["draft"], STREAMS["accept"]}
    for sid in (
        STREAM_BOOTSTRAP,
        STREAM_REQUALIFY_SAMPLE,
        STREAMS["law-positions"],
        STREAMS["live-rounds"],
        STREAMS["live-replay-seed"],
        STREAMS["live-starts"],
    ):
        assert sid % STREAMS_PER_REPLICATE not in uses


def test_every_stream_constant_is_registered() -> None:
    named = {k: v for k, v in vars(rng).items() if k.startswith("STREAM_")}
    registered = sorted(STREAMS.values()) + sorted(START_STREAMS.values())
    assert sorted(named.values()) == sorted(registered)


def test_request_start_draws_from_the_start_streams() -> None:
    # Recompute a request's start from the uniforms of the named streams (synth._request_start).
    cfg = SynthConfig()
    seed, rid = 20240611, "synth-00007"
    key = int(request_key(rid))

    def u(stream: int) -> float:
        return uniform_py(seed, key, 0, START_POSITION, stream)

    lo, hi = math.log(cfg.context_min), math.log(cfg.context_max)
    start = request_start(cfg, seed, rid)
    assert start.family == FAMILIES[int(u(START_STREAMS["start-family"]) * len(FAMILIES))]
    ctx = round(math.exp(lo + u(START_STREAMS["start-context"]) * (hi - lo)))
    assert start.context_tokens == ctx
    assert start.history == (
        int(np.int64(u(START_STREAMS["start-token1"]) * VOCAB_SIZE)),
        int(np.int64(u(START_STREAMS["start-token2"]) * VOCAB_SIZE)),
    )


def _literal_in(node: ast.AST) -> ast.Constant | None:
    for sub in ast.walk(node):
        if (
            isinstance(sub, ast.Constant)
            and isinstance(sub.value, int | float)
            and not isinstance(sub.value, bool)
        ):
            return sub
    return None


def _stream_literals(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, function) of every rng call whose stream argument contains a numeric literal."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        if name not in STREAM_ARG:
            continue
        index = STREAM_ARG[name]
        args: list[ast.AST] = [kw.value for kw in node.keywords if kw.arg == "stream"]
        if index is not None and len(node.args) > index:
            args.append(node.args[index])
        if any(_literal_in(a) is not None for a in args):
            found.append((node.lineno, name))
    return found


def test_no_bare_stream_literal_in_the_package() -> None:
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{line} {name}(…) passes a numeric stream literal"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line, name in _stream_literals(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert not offenders, "use a named stream of specreplay.sim.rng:\n" + "\n".join(offenders)


def test_stream_literal_check_catches_planted_literals() -> None:
    planted = (
        "uniform(seed, key, 0, 0, 11)\n"
        "rng.uniform_bits(seed, key, r, j, np.int64(3))\n"
        "uniform_py(seed, key, 0, 0, stream=4 * m + STREAM_DRAFT)\n"
        "uniform(seed, key, 0, 0, STREAM_DRAFT)\n"  # named: fine
        "stream_bits(base, 5)\n"  # a counter, not a stream id: fine
    )
    assert _stream_literals(ast.parse(planted)) == [
        (1, "uniform"),
        (2, "uniform_bits"),
        (3, "uniform_py"),
    ]


_MASK = (1 << 64) - 1


def _mix64_int(z: int) -> int:
    """splitmix64's finaliser on Python ints (Steele, Lea & Flood 2014), independent of numba."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def _fold_int(h: int, k: int) -> int:
    return _mix64_int((h + 0x9E3779B97F4A7C15 + k * 0xBF58476D1CE4E5B9) & _MASK)


def test_uniform_is_the_documented_fold_chain() -> None:
    seed, key, rnd, pos, stream = 12345, int(request_key("req-0")), 3, 2, STREAMS["accept"]
    h = _mix64_int((seed + 0x9E3779B97F4A7C15) & _MASK)
    for k in (key, rnd, pos, stream):
        h = _fold_int(h, k)
    assert uniform_py(seed, key, rnd, pos, stream) == (h >> 11) * 2.0**-53


def test_toy_state_key_is_a_fold_chain_of_rng() -> None:
    # sim.toy hashes states with sim.rng's fold (one splitmix implementation for both).
    salt_state = 0x70F57A7EC0DE0001
    family, context, t1, t2 = 2, 4096, 17, 128_000
    h = salt_state
    for k in (family, context, t1, t2):
        h = _fold_int(h, k)
    assert int(state_key(FAMILIES[family], context, (t1, t2))) == h


def _stream_constants_outside_rng(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of module-level ``STREAM_*`` constants defined with a numeric literal."""
    found = []
    for node in getattr(tree, "body", []):
        targets = (
            node.targets
            if isinstance(node, ast.Assign)
            else [node.target]
            if isinstance(node, ast.AnnAssign) and node.value is not None
            else []
        )
        value = getattr(node, "value", None)
        for t in targets:
            named = isinstance(t, ast.Name) and t.id.startswith("STREAM")
            if named and value is not None and _literal_in(value) is not None:
                found.append((node.lineno, getattr(t, "id", "")))
    return found


def test_stream_ids_are_defined_only_in_the_registry() -> None:
    # A new stream gets its id in sim/rng.py (and an entry in STREAMS); elsewhere only aliases
    # of registered names (e.g. toy's STREAM_DRAFT_I64 = np.int64(STREAM_DRAFT)).
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{line} {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != PACKAGE / "sim" / "rng.py"
        for line, name in _stream_constants_outside_rng(ast.parse(path.read_text("utf-8")))
    ]
    assert not offenders, "define stream ids in specreplay/sim/rng.py:\n" + "\n".join(offenders)
    planted = "STREAM_X: Final[int] = (1 << 62) + 3\nSTREAM_Y = np.int64(STREAM_DRAFT)\n"
    assert _stream_constants_outside_rng(ast.parse(planted)) == [(1, "STREAM_X")]
