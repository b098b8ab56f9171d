"""posenc's version, importable by any module without the package's public API."""

__version__ = "0.1.0"
