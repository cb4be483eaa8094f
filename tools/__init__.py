"""Tools an instruction can name (SPEC §5.1), in a registry: see ``registry.py``."""
