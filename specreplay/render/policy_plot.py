"""policies.png of ``sweep --policy``: tokens/s against the stop rule's threshold τ, per arm.

See docs/methods.md#policies-adaptive-drafting, docs/outputs.md#policies-in-a-sweep.

Two functions, as every plot: :func:`policy_series` picks the figures drawn from the typed result
(what the tests check), :func:`policy_figure` draws them. One panel per arm, pooled cell:

- each stop rule family at each maximum depth D (``stop-below:τ@D``, ``stop-cum:τ@D``) is one
  line of tokens/s (ESTIMATED) against τ, with its 95% interval as a band;
- the arm's best fixed depth (``Cell.best_depth``, the most tokens/s) is a dashed horizontal
  reference line, its interval a light grey band: a policy pays only above it;
- each ``depth-by-bucket`` policy has no τ, so it is not placed at one: a dash-dot horizontal
  line across the panel, its interval a bar right of the τ axis (placed in axis fractions,
  whatever the τ range), and its legend entry says "no τ".

Every figure drawn is **in-sample**: ``Cell.policies`` measures each policy on every request, the
requests the best-looking one would be chosen on, so the highest point is biased up (the winner's
curse). Whether a policy pays is the held-out verdict (``extra["policy_choice"]``), which this
plot does not draw: its title and axis say in-sample and send the reader to TABLES.md.

A policy without tokens/s (UNSUPPORTED, or no cost to price it) is not drawn; the panel names it
with its reason. The plot is written only when some policy has tokens/s (:func:`policy_series`
not empty), and its caption (:func:`policy_caption`) names only the series drawn. The canonical
spelling of a policy (``stop-below:0.1@5``) is read here with a pattern: renderers import no
grammar.
"""

from __future__ import annotations

import math
import re
import textwrap
from dataclasses import dataclass
from typing import Any, Final

from specreplay.render.canvas import new_figure
from specreplay.results.model import PolicyFigure, Result

__all__ = [
    "PolicyCurve",
    "PolicyLevel",
    "PolicyPanel",
    "policy_caption",
    "policy_figure",
    "policy_series",
    "stop_rule",
]

_STOP: Final = re.compile(r"^(stop-below|stop-cum):([^@]+)@(\d+)$")
_FAMILIES: Final[tuple[str, ...]] = ("stop-below", "stop-cum")


def stop_rule(policy: str) -> tuple[str, float, int] | None:
    """Return (family, τ, D) of a canonical stop rule; None for any other policy.

    >>> stop_rule("stop-cum:1e-05@5"), stop_rule("depth-by-bucket:<4K=5/>=4K=3")
    (('stop-cum', 1e-05, 5), None)
    """
    m = _STOP.match(policy)
    return None if m is None else (m.group(1), float(m.group(2)), int(m.group(3)))


@dataclass(frozen=True)
class PolicyCurve:
    """One stop rule family at one maximum depth: tokens/s (ESTIMATED) at each τ, τ ascending.

    ``y``, ``lo``, ``hi`` are ``tokens_per_s`` and its interval ends (an end is None where the
    result has none); ``policies`` the canonical policies drawn, in the order of ``tau``.
    """

    family: str
    max_depth: int
    tau: tuple[float, ...]
    y: tuple[float, ...]
    lo: tuple[float | None, ...]
    hi: tuple[float | None, ...]
    policies: tuple[str, ...]

    @property
    def name(self) -> str:
        """The legend's name: ``stop-below@5``."""
        return f"{self.family}@{self.max_depth}"


@dataclass(frozen=True)
class PolicyLevel:
    """A horizontal line: the best fixed depth, or a policy with no τ (``depth-by-bucket``)."""

    name: str
    y: float
    lo: float | None
    hi: float | None


@dataclass(frozen=True)
class PolicyPanel:
    """One arm's panel (pooled): its curves, its τ-free policies, its best fixed depth.

    ``omitted`` names each policy of the arm not drawn, with its reason.
    """

    arm: str
    curves: tuple[PolicyCurve, ...]
    tables: tuple[PolicyLevel, ...]
    depth: PolicyLevel | None
    omitted: tuple[str, ...]


def _curves(figs: list[PolicyFigure]) -> tuple[PolicyCurve, ...]:
    by: dict[tuple[str, int], list[tuple[float, PolicyFigure]]] = {}
    for f in figs:
        rule = stop_rule(f.policy)
        if rule is not None and f.tokens_per_s is not None:
            by.setdefault((rule[0], rule[2]), []).append((rule[1], f))
    out = []
    for (family, d), pts in sorted(by.items(), key=lambda kv: (_FAMILIES.index(kv[0][0]), kv[0])):
        pts.sort(key=lambda p: p[0])
        out.append(
            PolicyCurve(
                family,
                d,
                tuple(t for t, _ in pts),
                tuple(float(f.tokens_per_s or 0.0) for _, f in pts),
                tuple(f.tokens_per_s_lo for _, f in pts),
                tuple(f.tokens_per_s_hi for _, f in pts),
                tuple(f.policy for _, f in pts),
            )
        )
    return tuple(out)


def _best_depth(result: Result, arm: str) -> PolicyLevel | None:
    f = result.pooled.best_depth_figure(arm)
    if f is None or f.tokens_per_s is None:
        return None
    return PolicyLevel(
        f"best fixed depth {f.depth}", f.tokens_per_s, f.tokens_per_s_lo, f.tokens_per_s_hi
    )


def policy_series(result: Result) -> list[PolicyPanel]:
    """Per arm with a policy priced in tokens/s, its panel (module docstring); else empty."""
    if result.command != "sweep" or not result.cells:
        return []
    panels = []
    for arm in result.arms:
        figs = [f for f in result.pooled.policies if f.arm == arm]
        if not any(f.tokens_per_s is not None for f in figs):
            continue
        tables = tuple(
            PolicyLevel(f.policy, f.tokens_per_s, f.tokens_per_s_lo, f.tokens_per_s_hi)
            for f in figs
            if stop_rule(f.policy) is None and f.tokens_per_s is not None
        )
        omitted = tuple(
            f"{f.policy}: {f.null_reason or f.tokens_per_s_null_reason or 'no tokens/s'}"
            for f in figs
            if f.tokens_per_s is None
        )
        panels.append(PolicyPanel(arm, _curves(figs), tables, _best_depth(result, arm), omitted))
    return panels


def policy_caption(result: Result) -> str:
    """Return policies.png's caption, naming only the series :func:`policy_series` draws."""
    panels = policy_series(result)
    curves = list(dict.fromkeys(c.name for p in panels for c in p.curves))
    parts = []
    if curves:
        parts.append(
            f"tokens/s (ESTIMATED) against the threshold τ of {', '.join(curves)}, one line each "
            "with its 95% interval as a band"
        )
    if any(p.depth is not None for p in panels):
        parts.append("dashed: the best fixed depth's tokens/s, its interval a grey band")
    if any(p.tables for p in panels):
        parts.append(
            "dash-dot: each depth-by-bucket policy's tokens/s (it has no τ: a line across the"
            " panel), its interval a bar right of the τ axis"
        )
    if any(p.omitted for p in panels):
        parts.append("policies without tokens/s are named in the panel, not drawn")
    return (
        "Adaptive drafting per arm, pooled, in-sample (every request; the held-out verdict is in"
        " TABLES.md): " + "; ".join(parts) + "."
    )


_NO_TAU_X: Final[float] = 1.03
"""Where (axis fraction: right of the τ axis) a policy without a τ has its interval; 0.03 apart."""


def _no_tau(ax: Any, arm: str, k: int, t: PolicyLevel, colour: str) -> None:
    """Draw a policy without a τ: a line across the panel, its interval at an axis fraction.

    The interval is placed in axis coordinates (x) and data coordinates (y), so it sits at the
    same place whatever τ the axis shows: it is not drawn at a τ.
    """
    from matplotlib.transforms import blended_transform_factory

    ax.axhline(
        t.y,
        color=colour,
        ls="-.",
        lw=1.2,
        label=f"{t.name}, no τ (ESTIMATED)",
        gid=f"{arm}: {t.name}",
    )
    edge = blended_transform_factory(ax.transAxes, ax.transData)
    x = _NO_TAU_X + 0.03 * k
    lo = t.lo if t.lo is not None else t.y
    hi = t.hi if t.hi is not None else t.y
    out = {"color": colour, "transform": edge, "clip_on": False}
    ax.plot([x, x], [lo, hi], lw=1.2, gid=f"{arm}: {t.name} interval", **out)
    ax.plot([x], [t.y], "D", ms=5, gid=f"{arm}: {t.name} point", **out)


def _panel(ax: Any, panel: PolicyPanel) -> None:
    """Draw one arm's panel; each artist's ``gid`` names the arm and what it is (the tests)."""
    taus = [t for c in panel.curves for t in c.tau]
    for k, c in enumerate(panel.curves):
        colour = f"C{k % 10}"
        label = f"{c.name} (ESTIMATED)"
        ax.plot(
            c.tau, c.y, "-o", ms=4, color=colour, label=label, gid=f"{panel.arm}: curve {c.name}"
        )
        lo = [v if v is not None else y for v, y in zip(c.lo, c.y, strict=True)]
        hi = [v if v is not None else y for v, y in zip(c.hi, c.y, strict=True)]
        band = ax.fill_between(c.tau, lo, hi, color=colour, alpha=0.2, lw=0)
        band.set_gid(f"{panel.arm}: band {c.name}")
    if panel.depth is not None:
        d = panel.depth
        ax.axhline(
            d.y,
            color="k",
            ls="--",
            lw=1.2,
            label=f"{d.name} (ESTIMATED)",
            gid=f"{panel.arm}: depth",
        )
        if d.lo is not None and d.hi is not None:
            ax.axhspan(d.lo, d.hi, color="0.5", alpha=0.12, lw=0, gid=f"{panel.arm}: depth band")
    for k, t in enumerate(panel.tables):
        _no_tau(ax, panel.arm, k, t, f"C{(len(panel.curves) + k) % 10}")
    if taus and min(taus) > 0.0 and max(taus) / min(taus) >= 100.0:
        ax.set_xscale("log")  # τ over two decades or more (stop-cum grids): equal ratios apart
    if panel.omitted:
        text = "not drawn: " + "; ".join(panel.omitted)
        wrapped = "\n".join(textwrap.wrap(text, 70))
        ax.text(
            0.01,
            0.01,
            wrapped,
            transform=ax.transAxes,
            fontsize=6.5,
            va="bottom",
            ha="left",
            color="0.35",
        )
    ax.set_title(f"{panel.arm}: tokens/s by policy (pooled, in-sample)", fontsize=9)
    across = "; a line across: no τ" if panel.tables or panel.depth is not None else ""
    xlabel = "threshold τ of the stop rule" if taus else "(no stop rule drawn)"
    ax.set_xlabel(xlabel + across, fontsize=8)
    ax.set_ylabel("tokens/s in-sample (tokens per second, ESTIMATED)", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")


def policy_figure(result: Result) -> Any:
    """Return the figure of :func:`policy_series`: one panel per arm (module docstring)."""
    panels = policy_series(result)
    ncols = min(2, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig = new_figure(7.0 * ncols, 4.6 * nrows)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax in axes.ravel()[len(panels) :]:
        ax.set_visible(False)
    for ax, panel in zip(axes.ravel(), panels, strict=False):
        _panel(ax, panel)
    used = result.options.get("estimator_used")
    fig.suptitle(
        f"Adaptive drafting, IN-SAMPLE: tokens/s (ESTIMATED, 95% intervals) of each policy\n"
        f"on every request ({used}); the best-looking one is favoured by chance: whether\n"
        "a policy pays is the held-out verdict in TABLES.md, not drawn here",
        fontsize=9,
    )
    fig.tight_layout()
    return fig
