"""tcc.emit."""
