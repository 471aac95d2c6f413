"""The manual under docs/ builds with MkDocs in strict mode: every page is in the navigation,
every link between pages and every anchor resolves (mkdocs.yml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_docs_build_strict(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    pages = {p.relative_to(tmp_path / "site").as_posix() for p in (tmp_path / "site").rglob("index.html")}
    assert {"index.html", "commands/index.html", "verdicts/index.html", "benchmarks/index.html"} <= pages, pages


def test_docs_never_speak_of_how_the_project_was_made() -> None:
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text(encoding="utf-8").lower()
        assert "session" not in text, f"{page.name} mentions a session"
