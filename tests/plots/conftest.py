"""Plots run headless: the Agg backend (posenc builds Figure objects without pyplot)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
