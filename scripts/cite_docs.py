#!/usr/bin/env python3
"""Make the repository cite its own spec pages (docs/spec/) instead of documents outside it.

Comments and docstrings used to cite the project's contract ("CONTRACT §2.3"), the engine design
("DESIGN "Beat""), the Forms' seed texts ("seed 000: "…"") and tracker issues ("issue 13 item 1"),
none of which is in the repository. Each of those has a section in docs/spec/ now; this script
rewrites the citations to paths with anchors, e.g. ``CONTRACT §4.3`` →
``docs/spec/durable-workflow.md#dw-step``.

Usage:
    scripts/cite_docs.py [ROOT]          rewrite the files under ROOT (default: the repository)
    scripts/cite_docs.py --check [ROOT]  list the citations left; exit 1 when there is any

``--check`` also reports forms no table maps, for a person to rewrite: any ``Seed NNN``, a
``seed: "…"`` quote or ``(seed …)``, "the seed's …" / "the seed says" / "by the seed",
``STYLE §N`` (now docs/spec/house-rules.md#hr-…) and ``ANCHORS.md`` (now docs/performance.md).

A line holding ``cite-docs: ignore`` is left alone (e.g. a test that looks for the old words).
Exit codes: 0 nothing left (or rewritten), 1 ``--check`` found citations, 2 bad usage.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from pathlib import Path

SPEC = "docs/spec/"

#: CONTRACT.md section → page#anchor (docs/spec/README.md lists the pages).
CONTRACT_SECTIONS: dict[str, str] = {
    "1": "architecture.md#ar-shape",
    "2": "http-api.md",
    "2.1": "http-api.md#api-auth",
    "2.2": "http-api.md#api-res",
    "2.3": "http-api.md#api-op",
    "2.4": "http-api.md#api-errors",
    "2.5": "http-api.md#api-inst",
    "3": "worker-forms.md",
    "3.1": "worker-forms.md#wf-worker",
    "3.2": "worker-forms.md#wf-version",
    "3.3": "worker-forms.md#wf-deployment",
    "3.4": "durable-workflow.md",
    "4": "worker-forms.md#wf-abi",
    "4.1": "worker-forms.md#wf-loading",
    "4.2": "durable-workflow.md#dw-abi",
    "4.3": "durable-workflow.md#dw-step",
    "4.4": "worker-forms.md#wf-errors",
    "4.5": "durable-workflow.md#dw-binding",
    "4.6": "cron-trigger.md#cr-handler",
    "5": "durable-workflow.md#dw-doc",
    "6": "durable-workflow.md#dw-history",
    "7": "cron-trigger.md#cr-runs",
    "8": "host-limits.md#hl-decisions",
    "9": "architecture.md#ar-operating",
}

#: DESIGN.md section title (its first words) → page#anchor.
DESIGN_SECTIONS: dict[str, str] = {
    "tables": "architecture.md#ar-tables",
    "instance state machine": "architecture.md#ar-state-machine",
    "one replay context": "architecture.md#ar-context",
    "leases": "architecture.md#ar-lease",
    "events": "architecture.md#ar-events",
    "terminate and delete": "architecture.md#ar-terminate",
    "beat": "architecture.md#ar-beat",
    "dev mode": "architecture.md#ar-embedded",
    "tenant isolation": "architecture.md#ar-sandbox",
}
DESIGN_DEFAULT = "architecture.md"

#: Tracker issue → the theme page section that now states what it asked for.
ISSUES: dict[int, str] = {
    2: "host-features.md#hf-foundation",
    3: "host-features.md#hf-engine",
    4: "host-features.md#hf-stop",
    5: "host-features.md#hf-cron",
    6: "host-features.md#hf-one-command",
    10: "host-features.md#hf-isolation",
    11: "host-features.md#hf-one-stack",
    12: "host-features.md#hf-performance",
    13: "host-features.md#hf-observability",
    14: "host-features.md#hf-console",
    15: "host-features.md#hf-newcomer",
    23: "host-features.md#hf-real-work",
    24: "host-features.md#hf-neighbours",
    25: "host-features.md#hf-structure",
    27: "host-features.md#hf-console",
    28: "host-features.md#hf-testing",
}
#: Issues of this tracker are numbered below this; larger numbers are other projects' trackers.
MAX_PROJECT_ISSUE = 99
ISSUE_DEFAULT = "host-features.md"

#: Seed file → page, and for seed 000/003 the anchor picked by words of the quoted text.
SEED_PAGES: dict[str, str] = {
    "000": "durable-workflow.md",
    "002": "architecture.md#ar-background",
    "003": "cron-trigger.md",
    "004": "durable-workflow.md#dw-history",
}
SEED_KEYWORDS: dict[str, list[tuple[tuple[str, ...], str]]] = {
    "000": [
        (("retrypolicy", "maxattempts", "initialdelay", "backoff", "最終失敗", "effect", "do:"), "dw-step-do"),
        (("waitforevent", "timeoutseconds", "wait_timeout", "一致event", "消費"), "dw-step-wait"),
        (("停止を確認", "sleeping/waiting/terminal", "コード停止"), "dw-stop"),
        (("sleep", "sleeping"), "dw-step-sleep"),
        (("host error", "snake-case", "由来", "step_failed", "run_threw"), "dw-errors"),
        (("sendevent", "event_queue_full", "未消費event", "受理順", "1024件"), "dw-events"),
        (("terminate",), "dw-terminate"),
        (("delete", "削除", "purge", "dependency_conflict"), "dw-delete"),
        (("document", "params", "canonical", "property", "toJSON".lower()), "dw-doc"),
        (("id", "スカラー", "instance_exists", "unknown_instance"), "dw-instance-id"),
        (("replay", "決定的", "新しいobject", "module state", "一版"), "dw-replay"),
        (("step", "1024 step", "寿命"), "dw-step"),
        (("class", "export", "constructible", "new export"), "dw-abi"),
        (("observed", "ready", "put", "spec", "classname", "worker"), "dw-resource"),
        (("保持", "2592000"), "dw-retention"),
        (("status", "queued", "errored", "reason"), "dw-status"),
    ],
    "003": [
        (("日と曜日", "day-of-month", "day-of-week", "either"), "cr-days"),
        (("scheduled", "handler", "waituntil", "wait_until", "scheduledtime", "throw", "rejection"), "cr-handler"),
        (("at-least-once", "少なくとも一回", "冪等", "再配信", "redeliver"), "cr-delivery"),
        (("スキップ", "補填", "skip", "記録"), "cr-match"),
        (("observed", "nextmatchat", "scheduleready", "timezone"), "cr-observed"),
        (("フィールド", "cron", "要素", "step", "範囲", "utc", "名前"), "cr-grammar"),
        (("削除", "更新", "作成", "operation", "put", "delete"), "cr-crud"),
        (("spec", "privateinputs", "worker", "未知"), "cr-spec"),
    ],
}

_SECTION = r"§\s?(\d+(?:\.\d+)?)"
CONTRACT_RE = re.compile(
    r"CONTRACT(?:\.md)?(?:'s)?\s?" + _SECTION + r"((?:(?:,\s?|\s?[–-]\s?|\s?/\s?|\s(?:and|or)\s)§?\s?\d+(?:\.\d+)?)*)"
)
CONTRACT_MORE_RE = re.compile(r"(,\s?|\s?[–-]\s?|\s?/\s?|\s(?:and|or)\s)(§?)\s?(\d+(?:\.\d+)?)")
CONTRACT_BARE_RE = re.compile(r"\bCONTRACT(?:\.md)?\b(?!\s?§)")
DESIGN_RE = re.compile(r"\bDESIGN(?:\.md)?(?:'s)?(?::?\s?[\"“]([^\"”]{1,60})[\"”])?")
SEED_RE = re.compile(r"\bseeds?(?:/| )(00[0-4])(?:_[0-9a-f]{16}\.txt)?")
ISSUE_RE = re.compile(r"\b[Ii]ssue (\d{1,5})((?:,? items? \d+(?:(?:, | and |–|-)\d+)*))?")
OUTSIDE_RE = re.compile(r"/work/shared/|\bspec/seeds\b")

# Forms of citation that only ``--check`` reports (no table maps them: a person picks the anchor).
#: ``Seed 000``, ``seed 003``, ``seeds/002``: any case, any three-digit seed.
SEED_NUMBER_RE = re.compile(r"\bseeds?(?:/| )\d{3}\b", re.IGNORECASE)
#: ``seed: "…"`` (a quote of a seed text) and ``(seed 000 …)`` / ``(seed: the rule …)``; not a
#: parameter such as ``writer(seed: int)``.
SEED_QUOTE_RE = re.compile(r"\bseed:\s?[\"“「]|\(seed(?:\s|:\s?\w+\s)", re.IGNORECASE)
#: "the seed's shape", "the seed says", "by the seed", "Seed: a rule …" (not "the seed of the RNG").
SEED_PHRASE_RE = re.compile(
    r"\bthe seed(?:'s|’s|\s(?:says|said|is silent|sets|leaves|gives|asks|requires|allows)\b)"
    r"|\b(?:by|as in|from|of) the seed\b|(?-i:\bSeed:\s)",
    re.IGNORECASE,
)
#: STYLE.md sections (``STYLE §5``, ``STYLE "one way …"``, ``STYLE.md``): now docs/spec/house-rules.md.
STYLE_RE = re.compile(r"\bSTYLE(?:\.md\b|(?:'s)?\s?(?:§|[\"“]))")
#: bench/ANCHORS.md: now docs/performance.md and docs/spec/host-features.md#hf-performance.
ANCHORS_RE = re.compile(r"\bANCHORS\.md\b")

#: What ``--check`` reports: any citation of a document outside the repository.
CHECK_RES = (
    CONTRACT_RE,
    CONTRACT_BARE_RE,
    DESIGN_RE,
    SEED_NUMBER_RE,
    SEED_QUOTE_RE,
    SEED_PHRASE_RE,
    STYLE_RE,
    ANCHORS_RE,
    OUTSIDE_RE,
)

IGNORE_MARK = "cite-docs: ignore"
SUFFIXES = {".py", ".md", ".toml", ".yaml", ".yml", ".sh", ".html", ".js", ".css", ".txt", ".ini", ".cfg"}
SKIP_DIRS = {".git", ".venv", "node_modules", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
#: Files that quote the old citations on purpose (this script and its test), relative to ROOT.
SKIP_FILES = {"scripts/cite_docs.py", "tests/unit/test_cite_docs.py"}


def _spec(target: str) -> str:
    return SPEC + target


def _contract(section: str) -> str:
    major = section.split(".")[0]
    return _spec(CONTRACT_SECTIONS.get(section) or CONTRACT_SECTIONS.get(major) or "README.md")


def _design(title: str | None) -> str:
    if title:
        lowered = title.lower()
        for prefix, target in DESIGN_SECTIONS.items():
            if lowered.startswith(prefix):
                return _spec(target)
    return _spec(DESIGN_DEFAULT)


def _seed(number: str, following: str) -> str:
    page = SEED_PAGES[number]
    if "#" in page:
        return _spec(page)
    quote = re.match(r"""^(?:'s)?[:,]?\s?(?:[\w ]{0,20}\s)?["“]([^"”]{1,400})["”]""", following)
    text = (quote.group(1) if quote else following[:80]).lower()
    for words, anchor in SEED_KEYWORDS.get(number, []):
        if any(word in text for word in words):
            return _spec(f"{page}#{anchor}")
    return _spec(page)


def _issue_is_ours(number: int) -> bool:
    return number <= MAX_PROJECT_ISSUE


def rewrite_text(text: str) -> str:
    """``text`` with every outside citation replaced by a docs/spec path (lines holding
    ``cite-docs: ignore`` unchanged)."""
    lines = text.splitlines(keepends=True)
    return "".join(line if IGNORE_MARK in line else _rewrite_line(line) for line in lines)


def _rewrite_line(line: str) -> str:
    def contract(match: re.Match[str]) -> str:
        first = _contract(match.group(1))
        more = [first]
        for extra in CONTRACT_MORE_RE.finditer(match.group(2) or ""):
            target = _contract(extra.group(3))
            if target not in more:
                more.append(target)
        return ", ".join(more)

    line = CONTRACT_RE.sub(contract, line)
    line = CONTRACT_BARE_RE.sub(_spec("README.md"), line)
    line = DESIGN_RE.sub(lambda m: _design(m.group(1)) + (f' "{m.group(1)}"' if m.group(1) else ""), line)
    line = SEED_RE.sub(lambda m: _seed(m.group(1), line[m.end() :]), line)

    def issue(match: re.Match[str]) -> str:
        number = int(match.group(1))
        if not _issue_is_ours(number):
            return match.group(0)
        return _spec(ISSUES.get(number, ISSUE_DEFAULT))

    return ISSUE_RE.sub(issue, line)


def findings(text: str) -> Iterator[tuple[int, str]]:
    """(line number, cited text) of every citation of a document outside the repository."""
    for number, line in enumerate(text.splitlines(), start=1):
        if IGNORE_MARK in line:
            continue
        seen: set[tuple[int, int]] = set()
        for pattern in CHECK_RES:
            for match in pattern.finditer(line):
                if match.span() not in seen:
                    seen.add(match.span())
                    yield number, match.group(0).strip()
        for match in ISSUE_RE.finditer(line):
            if _issue_is_ours(int(match.group(1))):
                yield number, match.group(0)


def files(root: Path) -> Iterator[Path]:
    """The text files under ``root`` that may hold citations."""
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root)
        if any(part in SKIP_DIRS or part.endswith(".egg-info") for part in relative.parts):
            continue
        if relative.as_posix() in SKIP_FILES:
            continue
        if path.is_file() and (path.suffix in SUFFIXES or path.name in {"run", "Dockerfile"}):
            yield path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report citations left; exit 1 if any")
    parser.add_argument("root", nargs="?", default=str(Path(__file__).resolve().parents[1]))
    args = parser.parse_args(argv)
    root = Path(args.root)
    left = 0
    for path in files(root):
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if args.check:
            for number, cited in findings(text):
                left += 1
                print(f"{path.relative_to(root)}:{number}: {cited}")
        else:
            new = rewrite_text(text)
            if new != text:
                path.write_text(new, encoding="utf-8")
                print(f"rewrote {path.relative_to(root)}")
    if args.check and left:
        print(f"{left} citations of documents outside the repository", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
