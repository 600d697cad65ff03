"""tcc.lower."""
