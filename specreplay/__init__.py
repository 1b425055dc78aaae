"""specreplay: statistical replay and bootstrap simulator for speculative decoding."""

__version__ = "0.1.0"
