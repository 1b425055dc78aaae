"""Position-trace archives and observed inputs: read, validate, stream, write, import (SPEC §2)."""
