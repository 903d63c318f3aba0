"""Code cites the docs by page and anchor, ``docs/<page>.md#<anchor>``, and every citation resolves.

The anchors are computed as Python-Markdown's ``toc`` extension computes them for the site (mkdocs.yml), and that
rule is checked against Python-Markdown itself where it is installed (the ``docs`` extra).
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
SCANNED_DIRS = ("evaltasks", "flows", "action", "bench", "tests", "examples")
SCANNED_FILES = ("pyproject.toml", ".ci/run", "action.yml", "prefect.yaml")
SUFFIXES = {".py", ".sh", ".json", ".toml", ".yml", ".yaml", ".md", ".txt", ""}

#: ``docs/<page>.md`` with an optional ``#anchor``, not inside a longer path
CITATION = re.compile(r"(?<![\w/.-])docs/((?:[\w-]+/)*[\w-]+\.md)(?:#([\w-]+))?")
#: a citation of a README heading, in any of the spellings the code used before the docs pages existed
README_HEADING = re.compile(r"README(?:'s)?[,:]?(?:\s|\\n)+\\?\"")


def slug(text: str) -> str:
    """The anchor Python-Markdown's toc gives a heading: its default ``slugify`` of the heading's text (inline code
    and link markup dropped, accents folded to ASCII, other characters but word characters, spaces and hyphens
    removed, runs of spaces and hyphens made one hyphen)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text).replace("`", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(markdown: str) -> list[str]:
    """Every heading anchor of a Markdown text, in order: fenced code skipped, a repeated heading gets ``_1``,
    ``_2``... as toc's ``unique`` gives it."""
    found: list[str] = []
    fence = False
    for line in markdown.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
        match = None if fence else re.match(r"^#{1,6}[ \t]+(.*?)[ \t]*#*[ \t]*$", line)
        if match:
            base = anchor = slug(match.group(1))
            count = 0
            while anchor in found or not anchor:
                count += 1
                anchor = f"{base}_{count}"
            found.append(anchor)
    return found


def scanned_files() -> list[Path]:
    """The files where code cites the docs (this file left out: it writes wrong citations on purpose; so are
    virtualenvs and npm installs inside the scanned folders, such as the benchmarks' bench/.venv-eval-ai-library
    and bench/.promptfoo, whose packages are not this project's)."""
    files = [REPO / name for name in SCANNED_FILES if (REPO / name).is_file()]
    for folder in SCANNED_DIRS:
        files += [
            path
            for path in sorted((REPO / folder).rglob("*"))
            if path.is_file()
            and path.suffix in SUFFIXES
            and "__pycache__" not in path.parts
            and not any(
                part.startswith(".venv") or part in (".promptfoo", "node_modules")
                for part in path.relative_to(REPO).parts
            )
            and path != Path(__file__)
        ]
    return files


def broken_citations(text: str) -> list[str]:
    """The citations in ``text`` whose page does not exist or has no heading with that anchor."""
    broken = []
    pages: dict[str, list[str]] = {}
    for match in CITATION.finditer(text):
        page, anchor = match.group(1), match.group(2)
        if not (DOCS / page).is_file():
            broken.append(f"{match.group(0)}: no page docs/{page}")
            continue
        if anchor is not None:
            known = pages.setdefault(page, anchors((DOCS / page).read_text(encoding="utf-8")))
            if anchor not in known:
                broken.append(f"{match.group(0)}: docs/{page} has no heading with anchor #{anchor}")
    return broken


def test_every_citation_of_a_docs_page_resolves() -> None:
    """Each ``docs/<page>.md#<anchor>`` in the code, tests, benchmarks and examples names a page that exists and a
    heading of that page."""
    broken, count = [], 0
    for path in scanned_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        count += len(CITATION.findall(text))
        broken += [f"{path.relative_to(REPO)}: {problem}" for problem in broken_citations(text)]
    assert broken == []
    assert count >= 200, count  # the code cites the docs a few hundred times: the scan found them


def test_no_code_cites_a_readme_heading() -> None:
    """The README is a front door, not the specification: nothing cites its headings any more."""
    left = []
    for path in scanned_files():
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if README_HEADING.search(line):
                left.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert left == []


def test_the_readme_links_resolve() -> None:
    """The README's links into the repository (docs pages with their anchors, examples) point at what exists."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    local = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert len(local) >= 20, local
    problems = []
    for link in local:
        path, _, anchor = link.partition("#")
        if not (REPO / path).exists():
            problems.append(f"{link}: no file {path}")
        elif anchor and anchor not in anchors((REPO / path).read_text(encoding="utf-8")):
            problems.append(f"{link}: no heading with anchor #{anchor}")
    assert problems == []


def test_a_wrong_page_or_anchor_is_reported() -> None:
    """The check fails on what it should: a page that does not exist, an anchor no heading has."""
    page = "docs/" + "cli.md"
    assert broken_citations(f"({page}#exit-codes)") == []
    assert broken_citations(f"({page}#exit-code)") == [
        f"{page}#exit-code: docs/cli.md has no heading with anchor #exit-code"
    ]
    assert broken_citations("docs/" + "no-such-page.md") == ["docs/no-such-page.md: no page docs/no-such-page.md"]


def test_anchors_follow_python_markdown_toc_rules() -> None:
    """Inline code, punctuation and accents, repeated headings and headings inside code fences."""
    assert slug("Faster repeated runs: `evaltasks server`") == "faster-repeated-runs-evaltasks-server"
    assert (
        slug("Comments on pull requests from forks (`workflow_run`)")
        == "comments-on-pull-requests-from-forks-workflow_run"
    )
    assert slug("The run's parent process") == "the-runs-parent-process"
    assert slug("IVF search: 1,000,000 vectors") == "ivf-search-1000000-vectors"
    assert slug("Déjà vu — again") == "deja-vu-again"
    assert anchors("# A\n\n```bash\n# not a heading\n```\n\n## A\n\n## A\n") == ["a", "a_1", "a_2"]


@pytest.mark.parametrize("page", sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")))
def test_anchors_are_python_markdowns_own(page: str) -> None:
    """On every docs page, the anchors computed here are those Python-Markdown's toc gives the site's headings."""
    markdown = pytest.importorskip("markdown", reason="Python-Markdown comes with the docs extra (mkdocs)")
    renderer = markdown.Markdown(extensions=["toc", "tables", "fenced_code", "attr_list", "admonition"])
    renderer.convert((DOCS / page).read_text(encoding="utf-8"))

    def ids(tokens: list[dict]) -> list[str]:
        return [i for token in tokens for i in (token["id"], *ids(token["children"]))]

    assert anchors((DOCS / page).read_text(encoding="utf-8")) == ids(renderer.toc_tokens)
