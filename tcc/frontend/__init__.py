"""tcc.frontend."""
