"""The lab: train tiny transformers with every encoding and measure length generalisation.

``posenc lab`` runs the ``quick`` preset; ``posenc lab sweep CONFIG`` any grid. Pieces:
``tasks`` (seeded generators), ``config`` (validated frozen dataclasses), ``train`` and
``evaluate`` (one run), ``store`` (SQLite), ``sweep`` and ``executors`` (grids, resumable),
``report`` (HTML). The ``extend`` suite (``posenc lab extend``: RoPE's context-extension
methods against ALiBi, NoPE and FIRE past the training context) shares the configuration,
presets, store, results, findings, figures, report and summary modules; its runs, which
evaluate through ``posenc.eval``, are the subpackage ``extension``.
"""
