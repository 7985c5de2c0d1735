"""Metric declarations: what each metric is, declared once and read everywhere.

A plugin package ships metrics by naming a :class:`Metric` (a list of them, or a function
returning them) under the entry-point group ``ragjury.metrics``::

    [project.entry-points."ragjury.metrics"]
    brevity = "my_package.metrics:BREVITY"
"""

from ragjury.metrics.declaration import (
    BOOLEAN,
    COSINE,
    FRACTION,
    PERPLEXITY,
    RATING,
    BuildContext,
    EstimateContext,
    Metric,
    Scale,
    Tally,
)
from ragjury.metrics.registry import (
    ENTRY_POINT_GROUP,
    Registry,
    builtin_metrics,
    plugin_metrics,
    registry,
    scale_of,
)

__all__ = [
    "BOOLEAN",
    "COSINE",
    "ENTRY_POINT_GROUP",
    "FRACTION",
    "PERPLEXITY",
    "RATING",
    "BuildContext",
    "EstimateContext",
    "Metric",
    "Registry",
    "Scale",
    "Tally",
    "builtin_metrics",
    "plugin_metrics",
    "registry",
    "scale_of",
]
