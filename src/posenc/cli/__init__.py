"""The ``posenc`` command: the app of the extra ``posenc[lab]`` (typer, rich, matplotlib,
jinja2, pydantic, pyyaml), over the library.

``main`` checks first that the extra is installed, so a library-only install (``pip install
posenc``) gets one line saying what to install instead of a traceback; ``app`` (the typer app
of ``posenc.cli.commands``) is imported on first use.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import typer

#: The import names of the packages the extra ``posenc[lab]`` installs.
APP_PACKAGES: tuple[str, ...] = ("typer", "rich", "matplotlib", "jinja2", "pydantic", "yaml")
INSTALL_HINT = "pip install 'posenc[lab]'"


def missing_app_packages() -> list[str]:
    """The packages of ``APP_PACKAGES`` that cannot be imported here."""
    return [name for name in APP_PACKAGES if importlib.util.find_spec(name) is None]


def main() -> None:
    """Console-script entry point: one ``error:`` line and exit 1 without the app's extra."""
    missing = missing_app_packages()
    if missing:
        print(
            f"error: the posenc command needs the extra posenc[lab] ({', '.join(missing)} "
            f"missing): {INSTALL_HINT}",
            file=sys.stderr,
        )
        raise SystemExit(1)
    from .commands import app

    app(prog_name="posenc")


def __getattr__(name: str) -> typer.Typer:
    if name == "app":  # ``from posenc.cli import app``
        from .commands import app

        return app
    raise AttributeError(f"module 'posenc.cli' has no attribute {name!r}")
