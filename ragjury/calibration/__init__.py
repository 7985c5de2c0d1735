"""How far to trust a judge: its agreement with human labels (``ragjury calibrate``).

:mod:`ragjury.calibration.agreement` holds the figures (pure functions),
:mod:`ragjury.calibration.labels` reads labelled samples, and
:mod:`ragjury.calibration.sets` knows the labelled sets shipped in ``data/``.
"""
