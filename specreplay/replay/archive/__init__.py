"""Position-trace archives and observed inputs: read, validate, stream, write, import.

See docs/inputs.md.
"""
