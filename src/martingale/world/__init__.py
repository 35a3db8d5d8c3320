"""Question sources. ``synthetic`` is the embedded world with an exact Bayes oracle."""
