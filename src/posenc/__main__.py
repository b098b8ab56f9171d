"""``python -m posenc``: the ``posenc`` command (``posenc.cli``), for environments without the
installed script on PATH."""

from .cli import main

main()
