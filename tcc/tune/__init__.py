"""tcc.tune."""
