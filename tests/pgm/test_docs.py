"""docs/pgm.md's mbi-shaped example runs as written (so it cannot drift)."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "pgm.md"


def _block(heading: str) -> str:
    text = DOC.read_text()
    section = text[text.index(heading) :]
    found = re.search(r"^```python\n(.*?)^```$", section, re.M | re.S)
    assert found, f"no python block under {heading!r}"
    return found.group(1)


def test_marginals_to_samples_example_runs():
    code = _block("### From marginals to synthetic data")
    assert "marginals(model, factors=True).factors" in code
    assert "sample(model" in code
    exec(compile(code, str(DOC), "exec"), {})
