"""Arms: the drafting configurations a replay compares; grammar and canonical form.

See docs/commands.md#arms.

An **arm** is a drafting policy (how the drafter's archived candidates become its sampling law q),
the quantizer the drafter samples with, the quantizer the verifier uses to accept and to form the
residual, and a depth (number of drafted positions per round)::

    ARM    := POLICY [":" QUANT] ["/" QUANT] "@" DEPTH
    POLICY := "greedy" | PART (":" PART)*
    PART   := "top"K | "t"T | "p"P                        (at most one of each)
    QUANT  := "float64" | "float32" | "bfloat16" | "float16"
            | "dyadic"N [":nearest" | ":floor-argmax"]

Terms
-----
sampler
    The QUANT before ``/`` (default float64): the law the drafter samples its token from.
verifier
    The QUANT after ``/`` (default: the sampler's): the law the verifier uses in the accept test
    ``v·q(x) < p(x)`` and in the residual. A verifier different from the sampler is **mismatched**
    (the output law is then no longer exactly p, docs/methods.md#law-tests).
canonical form
    The spelling used in every output: parts in the order top, t, p; defaults omitted (``t1``,
    ``p1``, ``float64``, ``:nearest``, a verifier equal to the sampler); numbers printed minimally
    (``t0.7``, ``p0.9``, ``t1.5``, ``top32``). ``parse_arm(canonical(a))`` equals ``a``.

Decisions beyond docs/commands.md#arms
--------------------------
- **Greedy takes nothing else**: no top/t/p part and no QUANT on either side of ``/``, not even
  ``float64``. Greedy's q is a point mass on the draft's argmax, which every quantizer maps to
  itself (1 → 2^N exactly), so a sampler or verifier QUANT could only be a typo (SPEC: "greedy
  with t/p/QUANT" is an error).
- A sampled policy whose parts are all defaults (``t1``, ``p1``, ``t1:p1`` …, i.e. the full
  temperature-1 law over all candidates) is printed ``t1``: POLICY needs at least one part.
- Numbers: K, N and DEPTH are unsigned decimal integers (leading zeros allowed, printed without);
  T and P are decimal floats, optionally with an exponent (``t7e-1``), printed with Python's
  shortest round-trip ``repr`` minus a trailing ``.0``. T must be finite and > 0 (``t0`` → "use
  greedy"); P in (0, 1]; K ≥ 1 (``top_k=None`` means all candidates; a K larger than a row's
  candidates is flagged by the kernels, never clamped silently); N in 8..53; DEPTH in 1..127.
- Surrounding whitespace is ignored; everything else is case-sensitive and must match exactly.
- ``spelled`` (the user's text) does not take part in equality or hashing: two spellings of the same
  arm are equal, so arms can key dictionaries by meaning.

Every problem raises :class:`~specreplay.errors.SpecReplayError` with a one-line message that quotes
the arm text and says what was expected. This module depends only on the standard library and
:mod:`specreplay.sim.drafting` (an arm may draft by a policy, ``sweep --policy``).

Examples
--------
>>> a = parse_arm("t0.70:top32:dyadic8:nearest/float64@5")
>>> a.canonical, a.matched, a.sampler.bits
('top32:t0.7:dyadic8/float64@5', False, 8)
>>> parse_arm("greedy@3").canonical
'greedy@3'
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from specreplay.errors import SpecReplayError
from specreplay.sim.drafting import DraftRule

__all__ = [
    "DYADIC_BITS_RANGE",
    "FLOAT_KINDS",
    "MAX_DEPTH",
    "QUANT_KINDS",
    "ROUNDINGS",
    "Arm",
    "Policy",
    "Quant",
    "canonical",
    "parse_arm",
    "parse_arm_option",
]

FLOAT_KINDS: tuple[str, ...] = ("float64", "float32", "bfloat16", "float16")
QUANT_KINDS: tuple[str, ...] = (*FLOAT_KINDS, "dyadic")
ROUNDINGS: tuple[str, ...] = ("nearest", "floor-argmax")
# inclusive; 53 = float64's significand (docs/methods.md#arms-policy-and-quantizers)
DYADIC_BITS_RANGE: tuple[int, int] = (8, 53)
MAX_DEPTH = 127
_MAX_K = 2**62  # K is an int64 in the kernels

_GRAMMAR = 'ARM := POLICY[":"QUANT]["/"QUANT]"@"DEPTH'
_QUANT_HELP = "float64, float32, bfloat16, float16 or dyadicN[:nearest|:floor-argmax]"
_PART_HELP = f"greedy, topK, tT, pP or a QUANT ({_QUANT_HELP})"

_INT = re.compile(r"[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _is_int(x: object) -> bool:
    """Tell whether x is a Python or NumPy integer (has ``__index__``) and not a bool."""
    return hasattr(type(x), "__index__") and not isinstance(x, bool)


def _fmt_float(x: float) -> str:
    """Print a float minimally: shortest round-trip repr, without a trailing ``.0``."""
    s = repr(float(x))
    return s[:-2] if s.endswith(".0") else s


@dataclass(frozen=True)
class Policy:
    """How the drafter turns its archived candidates into its float64 law q (docs/commands.md#arms).

    Temperature, then top-k, then top-p (vLLM's order) on the candidates' log-probabilities,
    renormalised over the kept candidates; or greedy (a point mass on the highest log-probability).

    Attributes
    ----------
    greedy : bool
        Point mass on the argmax; every other field must then keep its default.
    top_k : int or None
        Keep the K most probable candidates (K ≥ 1); None keeps all.
    temperature : float
        T > 0, finite: log-probabilities are divided by T.
    top_p : float
        P in (0, 1]: keep candidates by decreasing probability until their mass reaches P.
    """

    greedy: bool = False
    top_k: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "greedy", bool(self.greedy))
        object.__setattr__(self, "temperature", float(self.temperature))
        object.__setattr__(self, "top_p", float(self.top_p))
        if self.greedy and (self.top_k is not None or self.temperature != 1.0 or self.top_p != 1.0):
            raise SpecReplayError(f"{self!r}: greedy takes no top_k, temperature or top_p")
        if self.top_k is not None and not (_is_int(self.top_k) and 1 <= self.top_k <= _MAX_K):
            raise SpecReplayError(f"{self!r}: top_k must be None (all) or an integer ≥ 1")
        if not (math.isfinite(self.temperature) and self.temperature > 0.0):
            raise SpecReplayError(f"{self!r}: temperature must be finite and > 0 (use greedy)")
        if not 0.0 < self.top_p <= 1.0:
            raise SpecReplayError(f"{self!r}: top_p must be in (0, 1]")
        if self.top_k is not None:
            object.__setattr__(self, "top_k", int(self.top_k))

    @property
    def spelling(self) -> str:
        """The canonical POLICY text (``greedy``, ``top32:t0.7``, ``t1`` for all defaults)."""
        if self.greedy:
            return "greedy"
        parts = []
        if self.top_k is not None:
            parts.append(f"top{self.top_k}")
        if self.temperature != 1.0:
            parts.append(f"t{_fmt_float(self.temperature)}")
        if self.top_p != 1.0:
            parts.append(f"p{_fmt_float(self.top_p)}")
        return ":".join(parts) if parts else "t1"


@dataclass(frozen=True)
class Quant:
    """A quantizer of the policy's float64 law (docs/methods.md#arms-policy-and-quantizers).

    Attributes
    ----------
    kind : str
        One of :data:`QUANT_KINDS`.
    bits : int
        N for ``dyadic`` (8..53: integers m_i with Σ m_i = 2^N); 0 for the float kinds.
    rounding : str
        ``nearest`` (largest remainder) or ``floor-argmax``; only dyadic may use floor-argmax.
    """

    kind: str = "float64"
    bits: int = 0
    rounding: str = "nearest"

    def __post_init__(self) -> None:
        lo, hi = DYADIC_BITS_RANGE
        if self.kind not in QUANT_KINDS:
            raise SpecReplayError(f"{self!r}: kind must be one of {', '.join(QUANT_KINDS)}")
        if self.rounding not in ROUNDINGS:
            raise SpecReplayError(f"{self!r}: rounding must be nearest or floor-argmax")
        if self.kind == "dyadic" and not (_is_int(self.bits) and lo <= self.bits <= hi):
            raise SpecReplayError(f"{self!r}: dyadic bits must be in {lo}..{hi}")
        if self.kind != "dyadic" and (self.bits != 0 or self.rounding != "nearest"):
            raise SpecReplayError(f"{self!r}: bits and rounding apply to dyadic only")
        object.__setattr__(self, "bits", int(self.bits))

    @property
    def spelling(self) -> str:
        """The canonical QUANT text (``float32``, ``dyadic24``, ``dyadic16:floor-argmax``)."""
        if self.kind != "dyadic":
            return self.kind
        suffix = "" if self.rounding == "nearest" else f":{self.rounding}"
        return f"dyadic{self.bits}{suffix}"


@dataclass(frozen=True)
class Arm:
    """One drafting configuration: policy, sampler and verifier quantizers, depth.

    Attributes
    ----------
    policy : Policy
    sampler : Quant
        The law the drafter samples from.
    verifier : Quant
        The law the verifier accepts with and forms the residual from.
    depth : int
        Drafted positions per round, 1..:data:`MAX_DEPTH`; with a ``rule``, its most positions.
    spelled : str
        The user's text (echoed in ``options``); defaults to the canonical form. Not compared.
    rule : StopRule or DepthByBucket, optional
        A drafting policy (``sweep --policy``, :mod:`specreplay.sim.drafting`) in place of the
        fixed depth: the replay's per-round values are the policy's. Set by :meth:`with_rule`.
    length : bool
        With a rule: the replay's per-round values are the positions the policy drafts
        (``t[:, d − 1]`` = E[min(L, d)], ``surv[:, k − 1]`` = P(L ≥ k)) instead of the tokens
        it keeps (docs/methods.md#policies-adaptive-drafting).
    """

    policy: Policy
    sampler: Quant = Quant()
    verifier: Quant = Quant()
    depth: int = 1
    spelled: str = field(default="", compare=False)
    rule: DraftRule | None = None
    length: bool = False

    def __post_init__(self) -> None:
        if not (_is_int(self.depth) and 1 <= self.depth <= MAX_DEPTH):
            raise SpecReplayError(f"{self.policy.spelling}@{self.depth}: depth must be 1..127")
        object.__setattr__(self, "depth", int(self.depth))
        if self.policy.greedy and (self.sampler != Quant() or self.verifier != Quant()):
            raise SpecReplayError("greedy takes no quantizer (its q is a point mass)")
        if self.rule is not None and self.depth != self.rule.max_depth:
            raise SpecReplayError(f"{self.canonical}: depth must be the policy's own")
        if self.length and self.rule is None:
            raise SpecReplayError("a length arm needs a drafting policy")
        if not self.spelled:
            object.__setattr__(self, "spelled", self.canonical)

    @property
    def canonical(self) -> str:
        """The canonical spelling, used in every output.

        See docs/methods.md#arms-policy-and-quantizers.
        """
        head = self.policy.spelling
        if self.sampler != Quant():
            head += f":{self.sampler.spelling}"
        if self.verifier != self.sampler:
            head += f"/{self.verifier.spelling}"
        if self.rule is not None:
            return f"{head} {self.rule.canonical}" + (" [L]" if self.length else "")
        return f"{head}@{self.depth}"

    @property
    def sampler_spelling(self) -> str:
        """The canonical form without its depth (policy and quantizers): ``top32:dyadic8``."""
        return Arm(self.policy, self.sampler, self.verifier, 1).canonical[: -len("@1")]

    def with_rule(self, rule: DraftRule, *, length: bool = False) -> Arm:
        """Return this arm's sampler drafting by ``rule`` (its depth the rule's most positions)."""
        return Arm(self.policy, self.sampler, self.verifier, rule.max_depth, "", rule, length)

    def at_depth(self, depth: int) -> Arm:
        """Return this arm's sampler at the fixed ``depth`` (no rule)."""
        return Arm(self.policy, self.sampler, self.verifier, depth)

    @property
    def matched(self) -> bool:
        """True when the verifier uses the same quantized q as the sampler (the exact law)."""
        return self.sampler == self.verifier


def canonical(arm: Arm) -> str:
    """Return the canonical spelling of ``arm`` (same as ``arm.canonical``)."""
    return arm.canonical


# ------------------------------------------------------------------------------------------------
# parser
# ------------------------------------------------------------------------------------------------


class _Parser:
    """One arm text's parse; ``fail`` raises the one-line error quoting the text."""

    def __init__(self, text: str) -> None:
        self.text = text

    def fail(self, what: str) -> SpecReplayError:
        return SpecReplayError(f"arm {self.text!r}: {what}")

    def integer(self, digits: str, token: str, name: str, lo: int, hi: int) -> int:
        # more than 19 significant digits exceed every bound (and int() refuses > 4,300 digits)
        small = _INT.fullmatch(digits) is not None and len(digits.lstrip("0")) <= 19
        if not small or not lo <= int(digits) <= hi:
            expected = f"≥ {lo}" if hi == _MAX_K else f"in {lo}..{hi}"
            raise self.fail(f"{name} must be an integer {expected}, got {token!r}")
        return int(digits)

    def number(self, digits: str, token: str, name: str) -> float:
        if not _FLOAT.fullmatch(digits):
            raise self.fail(f"{name} must be a decimal number, got {token!r}")
        value = float(digits)
        if not math.isfinite(value):
            raise self.fail(f"{name} must be finite, got {token!r}")
        return value

    def quant(self, tokens: list[str], side: str) -> Quant:
        """Parse QUANT tokens (``["dyadic8", "floor-argmax"]`` or ``["float32"]``)."""
        head = tokens[0]
        if head in FLOAT_KINDS:
            if len(tokens) > 1:
                raise self.fail(
                    f"{side} {head!r} takes no {':'.join(tokens[1:])!r}; "
                    "expected a rounding (:nearest or :floor-argmax) only after dyadicN"
                )
            return Quant(head)
        if not head.startswith("dyadic"):
            raise self.fail(f"expected a {side} QUANT ({_QUANT_HELP}), got {head!r}")
        lo, hi = DYADIC_BITS_RANGE
        bits = self.integer(head[len("dyadic") :], head, "N of dyadicN", lo, hi)
        rest = tokens[1:]
        if not rest:
            return Quant("dyadic", bits)
        if len(rest) == 1 and rest[0] in ROUNDINGS:
            return Quant("dyadic", bits, rest[0])
        raise self.fail(
            f"expected at most one rounding (:nearest or :floor-argmax) after {head!r}, "
            f"got {':'.join(rest)!r}"
        )

    def policy(self, tokens: list[str]) -> Policy:
        """Parse the POLICY parts (``greedy`` or distinct topK / tT / pP parts)."""
        if tokens == ["greedy"]:
            return Policy(greedy=True)
        if "greedy" in tokens:
            others = ":".join(t for t in tokens if t != "greedy")
            raise self.fail(
                f"greedy takes no other part (got {others!r}): greedy is a point mass on the "
                "draft's argmax, a quantizer cannot change it; expected 'greedy@DEPTH'"
            )
        seen: dict[str, str] = {}
        top_k: int | None = None
        temperature, top_p = 1.0, 1.0
        for tok in tokens:
            if tok.startswith("top"):
                key = "top"
            elif tok[:1] in ("t", "p"):
                key = tok[0]
            else:
                raise self.fail(f"unknown part {tok!r}; expected {_PART_HELP}")
            if key in seen:
                raise self.fail(
                    f"part {key!r} given twice ({seen[key]!r} and {tok!r}); "
                    "expected at most one each of topK, tT, pP"
                )
            seen[key] = tok
            if key == "top":
                top_k = self.integer(tok[3:], tok, "K of topK", 1, _MAX_K)
            elif key == "t":
                temperature = self.number(tok[1:], tok, "T of tT")
                if temperature == 0.0:
                    raise self.fail(
                        f"temperature 0 ({tok!r}): use greedy for a point mass on the argmax; "
                        "expected tT with T > 0"
                    )
                if temperature < 0.0:
                    raise self.fail(f"T of tT must be > 0, got {tok!r}")
            else:
                top_p = self.number(tok[1:], tok, "P of pP")
                if not 0.0 < top_p <= 1.0:
                    raise self.fail(f"P of pP must be in (0, 1], got {tok!r}")
        return Policy(top_k=top_k, temperature=temperature, top_p=top_p)

    def arm(self) -> Arm:
        text = self.text.strip()
        if text.count("@") != 1:
            raise self.fail(f"expected exactly one '@DEPTH' ({_GRAMMAR})")
        body, depth_text = text.split("@")
        depth = self.integer(depth_text, depth_text, "DEPTH", 1, MAX_DEPTH)
        if body.count("/") > 1:
            raise self.fail(f"expected at most one '/QUANT' for the verifier ({_GRAMMAR})")
        sampler_text, _, verifier_text = body.partition("/")
        tokens = sampler_text.split(":")
        if "" in tokens or (body.count("/") == 1 and "" in verifier_text.split(":")):
            raise self.fail(f"empty part; expected {_GRAMMAR}")
        # POLICY parts come first; the sampler QUANT (and its rounding) last.
        first_quant = next(
            (i for i, t in enumerate(tokens) if t in FLOAT_KINDS or t.startswith("dyadic")),
            len(tokens),
        )
        if first_quant == 0:
            raise self.fail(
                f"expected POLICY before the QUANT ({_GRAMMAR}; POLICY := {_PART_HELP})"
            )
        policy = self.policy(tokens[:first_quant])
        quant_tokens = tokens[first_quant:]
        has_verifier = body.count("/") == 1
        if policy.greedy and (quant_tokens or has_verifier):
            raise self.fail(
                "greedy takes no QUANT: its q is a point mass, which every quantizer leaves "
                "unchanged; expected 'greedy@DEPTH'"
            )
        for tok in quant_tokens[1:]:
            if tok not in ROUNDINGS:
                raise self.fail(
                    f"{tok!r} after the sampler QUANT {quant_tokens[0]!r}; expected POLICY parts "
                    "first, then one QUANT with an optional :nearest or :floor-argmax, "
                    "and '/' before the verifier's QUANT"
                )
        sampler = self.quant(quant_tokens, "sampler") if quant_tokens else Quant()
        verifier = self.quant(verifier_text.split(":"), "verifier") if has_verifier else sampler
        return Arm(policy, sampler, verifier, depth, spelled=self.text)


def parse_arm(text: str) -> Arm:
    """Parse one arm (the grammar of docs/commands.md#arms) into an :class:`Arm`.

    Parameters
    ----------
    text : str
        The user's spelling, e.g. ``"top32:t0.7:dyadic8/float64@5"``.

    Returns
    -------
    Arm
        With ``spelled = text``; ``.canonical`` gives the canonical spelling.

    Raises
    ------
    SpecReplayError
        One line quoting ``text`` and saying what was expected.

    Examples
    --------
    >>> parse_arm("top32:p0.9:dyadic16:floor-argmax@4").sampler
    Quant(kind='dyadic', bits=16, rounding='floor-argmax')
    >>> parse_arm("top32:t0:dyadic8@5")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    specreplay.errors.SpecReplayError: arm 'top32:t0:dyadic8@5': temperature 0 ('t0'): ...
    """
    if not isinstance(text, str):
        raise SpecReplayError(f"arm {text!r}: expected a string ({_GRAMMAR})")
    return _Parser(text).arm()


def parse_arm_option(option: str, text: str) -> Arm:
    """Parse the value of an arm option; a bad one names the option (``--baseline: arm …``).

    Examples
    --------
    >>> parse_arm_option("--baseline", "top32@0")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    specreplay.errors.SpecReplayError: --baseline: arm 'top32@0': DEPTH must be an integer ...
    """
    try:
        return parse_arm(text)
    except SpecReplayError as err:
        raise SpecReplayError(f"{option}: {err.message}") from None
