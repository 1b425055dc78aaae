"""docs/record-transformers.md's example runs as it stands, and prints what its comments say."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "record-transformers.md"


def python_block(text: str) -> str:
    """The page's first ```python block."""
    m = re.search(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
    assert m is not None, "no python block"
    return m.group(1)


def test_the_docs_example_runs() -> None:
    code = python_block(PAGE.read_text(encoding="utf-8"))
    # what the block says it prints: the `# ...` comment after each print
    expected = [
        line.split("#")[-1].strip() for line in code.splitlines() if line.startswith("print(")
    ]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(PAGE), "exec"), {"__name__": "docs_example"})
    printed = out.getvalue().splitlines()
    assert expected == ["8 True", "t1@4", "['t1@4', 't1:dyadic8@4']"]
    assert printed == expected
