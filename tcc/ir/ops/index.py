"""Indexing ops: gather/scatter families, resize, nonzero, unique, one_hot, ..."""
