"""Results: the typed result model, results.json, output folders and renderers.

Depends on :mod:`specreplay.replay`, :mod:`specreplay.stats` and :mod:`specreplay.sim`; never on
commands or the CLI.
"""

import specreplay.results.views  # noqa: F401  (registers the Result.to_polars views)
