"""The package version, in one place (read by pyproject.toml and written into results.json)."""

__version__ = "0.1.0"
