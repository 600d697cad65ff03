"""tcc.cli."""
