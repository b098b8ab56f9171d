"""Checks on score-bias encodings."""
