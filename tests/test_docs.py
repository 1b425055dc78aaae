"""The README and docs/ hold together: every relative link and #anchor resolves, the README fits.

Anchors follow GitHub's heading slugs: the heading text lowercased, inline markup (backquotes,
emphasis, link targets) reduced to its text, every character that is not a letter, digit, space,
hyphen or underscore dropped, each space turned into a hyphen, and a repeated slug numbered
``-1``, ``-2``, … in order. Headings and links inside fenced code blocks do not count. Links to
``http(s)://`` and ``mailto:`` targets are not followed (no network in tests).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 200
"""Issue 11, item 7: the README fits on a screen or two."""

_FENCE = re.compile(r"^(```|~~~)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_LINK = re.compile(r"(?<!\!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
_EXTERNAL = ("http://", "https://", "mailto:")


def pages() -> list[Path]:
    """README.md and every Markdown page of docs/, in a stable order."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _prose_lines(text: str) -> list[str]:
    """The lines of ``text`` outside fenced code blocks (HTML comments blanked)."""
    text = re.sub(r"<!--.*?-->", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    out, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text (before de-duplication).

    Examples
    --------
    >>> slug("The screen's rate (SP2)")
    'the-screens-rate-sp2'
    >>> slug("`specreplay interval A B`")
    'specreplay-interval-a-b'
    >>> slug("FastChat/Medusa answer files")
    'fastchatmedusa-answer-files'
    """
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"[`*]", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor GitHub gives the headings of ``path`` (duplicates numbered)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for line in _prose_lines(path.read_text(encoding="utf-8")):
        m = _HEADING.match(line)
        if m is None:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every Markdown link and image in ``path``'s prose."""
    found = []
    for i, line in enumerate(_prose_lines(path.read_text(encoding="utf-8")), start=1):
        for pattern in (_LINK, _IMAGE):
            found += [(i, m.group(1)) for m in pattern.finditer(line)]
    return found


def broken_links(page_list: list[Path], root: Path = ROOT) -> list[str]:
    """Every link of ``page_list`` whose file or #anchor does not exist, as ``page:line: target``
    (``page`` relative to ``root``)."""
    bad = []
    for page in page_list:
        for line, target in links(page):
            if target.startswith(_EXTERNAL):
                continue
            ref, _, anchor = target.partition("#")
            dest = (page.parent / ref).resolve() if ref else page
            rel = page.relative_to(root)
            if not dest.exists():
                bad.append(f"{rel}:{line}: {target} (no such file)")
            elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
                bad.append(f"{rel}:{line}: {target} (no such anchor)")
    return bad


def test_every_relative_link_and_anchor_resolves() -> None:
    assert len(pages()) >= 10, [p.name for p in pages()]
    assert broken_links(pages()) == []


def test_a_planted_broken_link_is_found(tmp_path: Path) -> None:
    """The check itself: a missing file, a missing anchor and a good link, told apart."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text(
        "# A page\n\n## The screen's rate (SP2)\n\n```\n## not a heading\n```\n",
        encoding="utf-8",
    )
    page = docs / "b.md"
    page.write_text(
        "# B\n\nSee [the rate](a.md#the-screens-rate-sp2), [gone](missing.md),\n"
        "[no anchor](a.md#not-a-heading), [here](#b) and [web](https://example.org/x#y).\n",
        encoding="utf-8",
    )
    bad = broken_links([page], root=tmp_path)
    assert bad == [
        "docs/b.md:3: missing.md (no such file)",
        "docs/b.md:4: a.md#not-a-heading (no such anchor)",
    ]


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Calibration of the intervals", "calibration-of-the-intervals"),
        ("Beyond one machine: Dask", "beyond-one-machine-dask"),
        ("convert (and synth's forms)", "convert-and-synths-forms"),
        ("results.json", "resultsjson"),
        ("The default interval: CR2, effective df, Hall's correction",
         "the-default-interval-cr2-effective-df-halls-correction"),
    ],
)  # fmt: skip
def test_slugs_follow_github(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_duplicate_headings_are_numbered(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text("# T\n\n## Notes\n\n## Notes\n\n## Notes\n", encoding="utf-8")
    assert anchors(page) == {"t", "notes", "notes-1", "notes-2"}


def test_readme_fits_on_a_screen() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, len(lines)


def test_readme_links_every_docs_page() -> None:
    """Each docs/ page is reachable from the README in one click."""
    targets = {t.partition("#")[0] for _, t in links(ROOT / "README.md")}
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"docs/{page.name}" in targets, page.name


def test_no_specification_section_is_cited() -> None:
    """Users have no SPEC.md: the README and docs cite docs/ anchors instead (issue 11, item 7)."""
    for page in pages():
        text = page.read_text(encoding="utf-8")
        assert "SPEC §" not in text and "seed 00" not in text, page.name


def _command_lines() -> list[tuple[str, str]]:
    """(page, line) of every ``specreplay …`` line in the code blocks of README.md and docs/."""
    found = []
    for page in pages():
        lang: str | None = None  # the open fence's language, None outside a fence
        block: list[str] = []
        for raw in page.read_text(encoding="utf-8").splitlines():
            fence = _FENCE.match(raw.lstrip())
            if fence and lang is None:
                lang, block = raw.lstrip()[3:].strip(), []
            elif fence:
                if lang in ("", "bash", "sh", "console"):
                    for line in "\n".join(block).replace("\\\n", " ").splitlines():
                        line = line.strip().split("  #")[0]
                        if line.startswith("specreplay "):
                            found.append((page.name, line))
                lang = None
            elif lang is not None:
                block.append(raw)
    return found


def test_documented_command_lines_use_real_verbs_and_options() -> None:
    """Every documented command line (examples and synopses, run or not) names a verb of the CLI
    and only options that verb takes, so a renamed option cannot leave docs/ stale."""
    import shlex

    import typer.main

    from specreplay.cli import app

    verbs = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    lines = _command_lines()
    assert len(lines) >= 40, len(lines)
    bad = []
    for page, line in lines:
        argv = shlex.split(line)
        verb = verbs.get(argv[1])
        if verb is None:
            bad.append(f"{page}: {line} (no verb {argv[1]!r})")
            continue
        takes = {o for p in verb.params for o in (*p.opts, *p.secondary_opts)}
        for arg in (a.lstrip("[(") for a in argv[2:]):
            name = arg.split("=")[0].rstrip("])…")
            if name.startswith("-") and not re.fullmatch(r"-[\d.]+", name) and name not in takes:
                bad.append(f"{page}: {line} ({name} is not an option of {argv[1]})")
    assert bad == []
