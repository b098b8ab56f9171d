"""Checks on context extension."""
