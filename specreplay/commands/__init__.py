"""One module per CLI verb: options → typed result → written outputs.

Depends on every layer below; only :mod:`specreplay.cli` imports it.
"""
