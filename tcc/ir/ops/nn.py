"""nn ops."""
