"""The lab: train tiny transformers with every encoding and measure length generalisation.

``posenc lab`` runs the ``quick`` preset; ``posenc lab sweep CONFIG`` any grid. Pieces:
``tasks`` (seeded generators), ``config`` (validated frozen dataclasses), ``train`` and
``evaluate`` (one run), ``store`` (SQLite), ``sweep`` and ``executors`` (grids, resumable),
``report`` (HTML).
"""
