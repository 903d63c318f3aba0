"""The package version, in one place (read by pyproject.toml and written into results.json)."""

__version__ = "1.0.0"

DOCS_URL: str | None = None
"""The documentation's base URL: the one place to set it once the docs site exists. None until then: help texts
name the section of the docs (a heading of a page in the repository's docs/ folder)."""


def docs_ref(section: str) -> str:
    """How a help text points to the docs section titled ``section``: ``docs, "Run history and drift"`` while
    :data:`DOCS_URL` is None, else ``DOCS_URL#run-history-and-drift`` (GitHub's anchor of a heading)."""
    if DOCS_URL is None:
        return f'docs, "{section}"'
    anchor = "-".join("".join(c for c in section.lower() if c.isalnum() or c in " -").split(" "))
    return f"{DOCS_URL.rstrip('/')}#{anchor}"
