"""The package version, in one place (read by pyproject.toml and written into results.json)."""

__version__ = "1.0.0"

DOCS_URL: str | None = None
"""The documentation's base URL: the one place to set it once the docs site exists. None until then: help texts
name the section of the docs (a heading of a page in the repository's docs/ folder)."""


#: The docs page (and anchor) of each section the help texts point to (tests check that each one resolves).
DOCS_PAGES: dict[str, str] = {
    "CLI": "docs/cli.md",
    "Suite file": "docs/suite.md",
    "Reference index": "docs/embeddings.md#reference-index",
    "Run history and drift": "docs/history.md",
    "Threshold calibration": "docs/calibration.md",
    "Faster repeated runs: `evaltasks server`": "docs/server.md",
    "Prefect": "docs/prefect.md",
    "Starter suite": "docs/cli.md#starter-suite-evaltasks-init",
    "Targets": "docs/targets.md",
}


def docs_ref(section: str) -> str:
    """How a help text points to the docs section titled ``section``: its page in the repository
    (``docs/history.md``, :data:`DOCS_PAGES`) while :data:`DOCS_URL` is None, else that page on the site
    (``DOCS_URL/history/``, mkdocs' directory URLs, with the page's anchor when it has one). A section without a
    page is named as ``docs, "Title"``."""
    page = DOCS_PAGES.get(section)
    if page is None:
        return f'docs, "{section}"'
    if DOCS_URL is None:
        return page
    path, _, anchor = page.removeprefix("docs/").partition("#")
    url = f"{DOCS_URL.rstrip('/')}/{path.removesuffix('.md')}/"
    return f"{url}#{anchor}" if anchor else url
