"""The README is a user's front page and the docs cite only what the repository holds
(docs/spec/house-rules.md#hr-docs): at most 300 lines, every relative link resolves, no pointer
to documents kept outside the repository, and no example README asks the user to edit a file
the tests pin."""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess

import pytest

from host_cli import manifest

ROOT = pathlib.Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "examples").glob("*/README.md"))]
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")
# Words that point at documents outside the repository: the Forms' seed texts, the contract,
# the design sketch, the style guide and the old anchors file.
OUTSIDE = re.compile(r"\bseed(?:'s| says| 0\d\d)\b|\bseeds/|CONTRACT(?:\.md| §)|DESIGN\.md|STYLE(?:\.md| §)|ANCHORS\.md")  # cite-docs: ignore


def test_the_readme_is_a_front_page_of_at_most_300_lines() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines; move detail to docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: pathlib.Path) -> None:
    text = CODE.sub("", page.read_text(encoding="utf-8"))
    broken = [
        target
        for target, _anchor in LINK.findall(text)
        if "://" not in target and not target.startswith("mailto:") and not (page.parent / target).exists()
    ]
    assert broken == [], f"{page.relative_to(ROOT)} links to missing files: {broken}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_cites_a_document_outside_the_repository(page: pathlib.Path) -> None:
    hits = [
        f"{n}: {line.strip()}"
        for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert hits == [], f"{page.relative_to(ROOT)} cites documents outside the repository: {hits}"


def test_nightly_report_fires_every_minute_from_a_copy_not_by_editing_the_example(tmp_path: pathlib.Path) -> None:
    """examples/nightly-report/README.md's "watch it fire now" commands, run as written (with
    the copy in ``tmp_path``): the copy fires every minute, the example keeps its nightly cron."""
    text = (ROOT / "examples" / "nightly-report" / "README.md").read_text(encoding="utf-8")
    block = text.split("To watch it fire now", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    commands = [line for line in block.strip().splitlines() if not line.startswith("takohost ")]
    assert commands and all("/tmp/nightly-report" in line for line in commands)
    copy = tmp_path / "nightly-report"
    script = "\n".join(commands).replace("/tmp/nightly-report", str(copy))
    subprocess.run(["bash", "-euc", script], cwd=ROOT, check=True)
    try:
        assert [t.cron for t in manifest.load(copy).triggers] == ["* * * * *"]
        assert [t.cron for t in manifest.load(ROOT / "examples" / "nightly-report").triggers] == ["0 2 * * *"]
    finally:
        shutil.rmtree(copy, ignore_errors=True)
