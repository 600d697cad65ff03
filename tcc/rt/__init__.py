"""tcc.rt."""
