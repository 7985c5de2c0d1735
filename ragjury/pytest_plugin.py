"""The pytest plugin (entry point ``pytest11``): a ``jury`` fixture for RAG assertions.

Inert unless a test asks for ``jury``: importing this module imports nothing of ragjury's,
opens no database and makes no request. The fixture is session-wide; its settings come from
``ragjury.toml`` and ``RAGJURY_*`` / ``OPENAI_*`` variables, as the command line's do
(override the ``ragjury_settings`` fixture to build them in code)::

    def test_answer_is_grounded(jury):
        jury.assert_faithful("Where is it?", "It is in Paris.", ["The tower is in Paris."])
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from ragjury.config import Settings
    from ragjury.testing import JuryAssertions


@pytest.fixture(scope="session")
def ragjury_settings() -> Settings:
    """The jury's settings: defaults < ragjury.toml < environment."""
    from ragjury.config import Settings

    return Settings.from_environment()


@pytest.fixture(scope="session")
def jury(ragjury_settings: Settings) -> Iterator[JuryAssertions]:
    """Judge answers in tests: ``jury.assert_faithful``, ``assert_correct``, ``assert_metric``
    and ``evaluate``. Judgements are kept in ``settings.db``: an unchanged re-run asks no LLM."""
    from ragjury.testing import JuryAssertions

    with JuryAssertions(ragjury_settings) as assertions:
        yield assertions
