"""The product speaks of now: no date (YYYY-MM-DD) in a comment or string of src/ nor in a comment of the shipped
configs. When something was measured or changed belongs to CHANGELOG.md and docs/benchmarks.md's summary tables."""
from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "encoderlab"
DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
TEXT_TOKENS = {tokenize.COMMENT, tokenize.STRING} | {getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
YAML_COMMENT = re.compile(r"(?:^|\s)#(.*)$")


def dated_python(path: Path, rel: Path) -> list[str]:
    found = []
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline):
        if tok.type in TEXT_TOKENS:
            for offset, line in enumerate(tok.string.splitlines()):
                if DATE.search(line):
                    found.append(f"{rel}:{tok.start[0] + offset}: {line.strip()}")
    return found


def dated_yaml(path: Path, rel: Path) -> list[str]:
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        comment = YAML_COMMENT.search(line)
        if comment and DATE.search(comment.group(1)):
            found.append(f"{rel}:{number}: {line.strip()}")
    return found


def dated(src: Path) -> list[str]:
    found = []
    for path in sorted(src.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        rel = path.relative_to(src)
        if path.suffix == ".py":
            found += dated_python(path, rel)
        elif path.suffix in (".yaml", ".yml") and "configs" in rel.parts:
            found += dated_yaml(path, rel)
    return found


def test_no_date_in_comments_docstrings_or_config_comments():
    found = dated(SRC)
    assert not found, "dates belong in CHANGELOG.md:\n" + "\n".join(found)


def test_a_date_is_found_and_named_by_file_and_line(tmp_path):
    (tmp_path / "m.py").write_text('"""Measured 2026-01-02."""\nx = 1  # on 2026-01-03\ny = "2026"\n')
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "a.yaml").write_text("name: a  # 2026-01-04\nkey: value\n# plain comment\n")
    assert dated(tmp_path) == ["configs/a.yaml:1: name: a  # 2026-01-04", 'm.py:1: """Measured 2026-01-02."""',
                               "m.py:2: # on 2026-01-03"]
    (tmp_path / "m.py").write_text('"""Measured on a quiet machine."""\n')
    (tmp_path / "configs" / "a.yaml").write_text("name: a  # why, not when\n")
    assert dated(tmp_path) == []


README = SRC.parents[1] / "README.md"
# A measured time: "11 minutes", "4.9 min", "30 s", "2:45"; the README links docs/benchmarks.md for them instead.
TIMED = re.compile(r"\b\d+(?:[.,]\d+)?\s*(?:min(?:utes?)?|seconds?|s|h|hours?)\b|\b\d+:\d{2}\b")


def test_the_readme_is_a_product_page():
    """At most 150 lines and 1,500 words, no date, and no measured time except the one line that links the
    benchmarks' summary."""
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= 150 and len(text.split()) <= 1500, (len(lines), len(text.split()))
    assert not DATE.search(text)
    timed = [line for line in lines if TIMED.search(line.replace("`", "")) and "docs/benchmarks.md" not in line]
    assert timed == [], timed
    assert any("docs/benchmarks.md" in line for line in lines)


DOCS = [*sorted((SRC.parents[1] / "docs").glob("*.md")), README]
# "`study/results.py` `task_scores`": a name in a module, as the docs point a reader to code
NAMED_IN_FILE = re.compile(r"`((?:\w+/)+\w+\.py)` `(\w+)`")


def missing_names(docs: list[Path], roots: list[Path]) -> list[str]:
    """Each `path.py` `NAME` of the docs whose file (under one of `roots`) neither defines nor imports NAME."""
    found = []
    for doc in docs:
        for path, name in NAMED_IN_FILE.findall(doc.read_text(encoding="utf-8")):
            file = next((root / path for root in roots if (root / path).is_file()), None)
            defined = re.compile(rf"^\s*(?:async\s+)?(?:def|class)\s+{name}\b|^\s*{name}\s*(?::[^=\n]*)?="
                                 rf"|^\s*from\s+\S+\s+import\s+.*\b{name}\b", re.M)
            if file is None or not defined.search(file.read_text(encoding="utf-8")):
                found.append(f"{doc.name}: `{path}` `{name}`" + (" (no such file)" if file is None else ""))
    return found


def test_the_code_the_docs_name_exists():
    """docs/extending.md named `study/results.py` `CATEGORIES`, which no file defines."""
    assert missing_names(DOCS, [SRC, SRC.parents[1]]) == []


def test_a_name_no_file_defines_is_found(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text("from x import used\nKNOWN = 1\n\ndef run():\n    pass\n")
    (tmp_path / "d.md").write_text("`pkg/m.py` `KNOWN`, `pkg/m.py` `run`, `pkg/m.py` `used`, `pkg/m.py` `GONE`, "
                                   "`pkg/n.py` `run`\n")
    assert missing_names([tmp_path / "d.md"], [tmp_path]) == ["d.md: `pkg/m.py` `GONE`",
                                                             "d.md: `pkg/n.py` `run` (no such file)"]


LINK = re.compile(r"\]\(([^)\s#]*)(?:#([^)\s]+))?\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but '-' and '_' dropped, spaces as '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def broken_links(docs: list[Path]) -> list[str]:
    """Each relative link of the docs to a file that is not there, or to a heading its file does not have."""
    found = []
    for doc in docs:
        for path, fragment in LINK.findall(doc.read_text(encoding="utf-8")):
            if re.match(r"\w+:", path):  # https:, mailto:
                continue
            target = (doc.parent / path).resolve() if path else doc
            if not target.exists():
                found.append(f"{doc.name}: {path} (no such file)")
            elif fragment and target.suffix == ".md":
                text = FENCE.sub("", target.read_text(encoding="utf-8"))
                if fragment not in {anchor(h) for h in re.findall(r"^#+\s+(.*)$", text, re.M)}:
                    found.append(f"{doc.name}: {path}#{fragment} (no such heading)")
    return found


def test_the_docs_links_reach_their_files_and_headings():
    """docs/evaluation.md linked benchmarks.md#worker-processes-..., a heading benchmarks.md no longer has."""
    docs = [*DOCS, *sorted((SRC.parents[1] / "docs").rglob("*/*.md")), SRC.parents[1] / "CHANGELOG.md"]
    assert broken_links(docs) == []


def test_a_link_to_a_missing_file_or_heading_is_found(tmp_path):
    (tmp_path / "b.md").write_text("# Sweep throughput (`sweep.py`)\n```\n# not a heading\n```\n")
    (tmp_path / "a.md").write_text("[x](b.md#sweep-throughput-sweeppy) [y](b.md#gone) [z](c.md) [w](b.md#not-a-heading)"
                                   " [u](https://x.org/a#b) [s](#top)\n# Top\n")
    assert broken_links([tmp_path / "a.md"]) == ["a.md: b.md#gone (no such heading)", "a.md: c.md (no such file)",
                                                 "a.md: b.md#not-a-heading (no such heading)"]
