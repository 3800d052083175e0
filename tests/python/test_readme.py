"""The Python blocks of the README and of every docs/*.md page run as
written against the installed wheel.

Each ```python block runs in a fresh interpreter with a fresh home, after
the shell lines of the same document that come before it (`plughost
plugins install examples/…`, run with the wheel's own CLI); every
`print(...)  # → TEXT` line must print TEXT, in order. A block that is a
copy of an example plugin's file (first line `# examples/…`) is
tests/suite/readme.rs's, as are the shell blocks. The pages are listed from
the directory, so a new page is covered without a change here.
"""

from __future__ import annotations

import inspect
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import plughost

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCUMENTS = [README, *sorted((ROOT / "docs").glob("*.md"))]


def _blocks(markdown: str):
    """(language, text) of each fenced block, in order; a block whose fence
    says `(untested: …)` is left out, as the README explains."""
    found = re.findall(r"^```(\w*)([^\n]*)\n(.*?)^```$", markdown, flags=re.M | re.S)
    return [(language, text) for language, info, text in found if "(untested:" not in info]


def _command(line: str) -> str:
    """The command part of a shell line (its `# comment` dropped)."""
    return re.split(r"\s+#\s", line, maxsplit=1)[0].strip()


def _run_python_blocks(document: Path, tmp_path: Path) -> int:
    """Run `document`'s Python blocks; how many ran."""
    env = dict(os.environ, PLUGHOST_HOME=str(tmp_path / "home"), HOME=str(tmp_path))
    env.pop("PLUGHOST_BUNDLED_DIR", None)
    ran = 0
    setup: list[str] = []
    for language, text in _blocks(document.read_text()):
        if language == "sh":
            # The document's own set-up lines for its Python examples.
            setup += [
                _command(line)
                for line in text.splitlines()
                if _command(line).startswith("plughost plugins install examples/")
            ]
            continue
        if language != "python" or text.startswith("# examples/"):
            continue  # a copy of an example plugin's file: tests/suite/readme.rs checks those
        for command in setup:
            args = shlex.split(command)[1:]
            subprocess.run(
                [sys.executable, "-m", "plughost", *args],
                cwd=ROOT, env=env, check=True, capture_output=True, text=True,
            )
        setup.clear()
        done = subprocess.run(
            [sys.executable, "-c", text], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, f"{document.name}: {done.stderr}"
        expected = [m.strip() for m in re.findall(r"^\s*print\(.*\)\s+# → (.*)$", text, flags=re.M)]
        assert expected, f"a Python block of {document.name} shows no output (mark a fragment `(untested: …)` on its fence)"
        assert done.stdout.splitlines() == expected, f"{document.name}: {done.stdout}"
        ran += 1
    return ran


def test_readme_python_blocks_run_with_the_output_they_show(tmp_path: Path) -> None:
    assert _run_python_blocks(README, tmp_path) > 0


@pytest.mark.parametrize("document", DOCUMENTS[1:], ids=lambda p: f"docs/{p.name}")
def test_docs_python_blocks_run_with_the_output_they_show(document: Path, tmp_path: Path) -> None:
    _run_python_blocks(document, tmp_path)


def test_help_shows_real_defaults() -> None:
    shown = [
        inspect.signature(plughost.Host.call_tool),
        inspect.signature(plughost.Host),
        inspect.signature(plughost.Agent),
        inspect.signature(plughost.Agent.send),
    ]
    for signature in shown:
        assert "Ellipsis" not in str(signature), signature
    assert "session_id=''" in str(shown[0])
    assert "model='scripted:demo'" in str(shown[2])
