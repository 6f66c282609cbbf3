"""The dedup modes, one module each."""
