"""Results: the contract every verb writes and every renderer reads.

The typed result model, results.json and its schema, output folders, privacy (hashed ids) and
the polars views.

Imports nothing from the replay, the statistics, the pipelines or the renderers.
"""

import specreplay.results.summary  # (registers the Result and Cell reprs)
import specreplay.results.views  # noqa: F401  (registers the Result.to_polars views)
