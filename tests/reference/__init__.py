"""Independent float64 references written from the papers' formulas.

Plain Python loops and ``math`` / NumPy: nothing here imports posenc, so a shared bug cannot
hide in both sides of a comparison.
"""
