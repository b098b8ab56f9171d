"""Plots run headless: the Agg backend, and every figure closed after each test."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
