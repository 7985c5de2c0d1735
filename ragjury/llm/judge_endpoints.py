"""The settings of a panel judge's own client: what ragjury.toml declares for it
(``[panel.NAME]``: its key's variable, concurrency, rpm, tpm, price) over the run's."""

from __future__ import annotations

import os

from ragjury.config import JudgeEndpoint, Settings
from ragjury.errors import ConfigurationError
from ragjury.schemas.panel import PanelJudge


def declared_for(settings: Settings, judge: PanelJudge) -> JudgeEndpoint | None:
    """The declaration of ``judge`` in ``settings``, when it is this judge (same model and
    endpoint): a declaration of another model under the same name lends it nothing."""
    found = settings.panel.get(judge.name)
    return found if found is not None and found.serves(judge, settings.base_url) else None


def api_key_of(name: str, declared: JudgeEndpoint) -> str | None:
    """The judge's key from the variable its declaration names; a clear error when unset."""
    if declared.api_key_env is None:
        return None
    key = os.environ.get(declared.api_key_env)
    if not key:
        raise ConfigurationError(
            f"judge {name!r}: [panel.{name}] in ragjury.toml takes its API key from "
            f"{declared.api_key_env}, which is not set; export {declared.api_key_env}=... "
            "(or drop api_key_env to use the run's key)"
        )
    return key


def judge_endpoint(
    settings: Settings, name: str, model: str, base_url: str | None
) -> dict[str, object]:
    """The settings the client of judge ``name`` takes over the run's ``settings``."""
    declared = declared_for(settings, PanelJudge(name=name, model=model, base_url=base_url))
    if declared is None:
        return {}
    update: dict[str, object] = {
        field: getattr(declared, field)
        for field in ("concurrency", "rpm", "tpm")
        if getattr(declared, field) is not None
    }
    key = api_key_of(name, declared)
    if key is not None:
        update["api_key"] = key
    if declared.price is not None:
        update["prices"] = {**settings.prices, model: declared.price}
    return update
