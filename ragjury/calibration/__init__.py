"""How far to trust a judge: its agreement with human labels (``ragjury calibrate``).

:mod:`ragjury.calibration.agreement` holds the figures (pure functions),
:mod:`ragjury.calibration.labels` reads labelled samples, and
:mod:`ragjury.calibration.sets` knows the labelled sets shipped in ``data/``.
"""

LABEL_FIELD = "human"
"""The record field that holds the person's verdict: in the bundled sets, and by default in a
labels file (here, not in :mod:`~ragjury.calibration.sets`, so that evaluate's flags, which name
it, load neither pydantic models nor TOML)."""
