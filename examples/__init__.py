"""Examples beside the package (not in the wheel): ``python -m examples.demo``."""
