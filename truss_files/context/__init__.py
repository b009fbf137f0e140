"""Identity (L0), principals (L1) and the layered context a run starts from."""
