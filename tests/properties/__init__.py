"""Property-based tests (hypothesis) of the math each positional-encoding family claims."""
