"""A judge panel and repeats as a job stores them (``--judges``, ``--repeats``, ``--combine``),
and the lane ids that keep each (judge, repeat) apart: plain data, below the job spec.

Each LLM-judged metric of a job with a panel is asked of every judge (its own model and
endpoint) ``repeats`` times; each (judge, repeat) is a *lane*, whose copy of the sample
carries the lane in its id (``<id>@@<judge>#<repeat>``), so each lane's steps are cached
apart and a repeat is never served another repeat's answer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Literal, Protocol
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

Combine = Literal["majority", "mean", "median", "min"]
COMBINE: tuple[Combine, ...] = ("majority", "mean", "median", "min")
LANE_MARK = "@@"
REPEAT_TEMPERATURE = 0.7
"""The temperature repeats are asked at when the configured temperature is 0 (repeats of a
deterministic judge would only measure the cache)."""
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
_EXAMPLE = "e.g. --judges a=gpt-4o-mini,b=llama3.1@http://localhost:11434/v1"


class Declared(Protocol):
    """A judge declared in ragjury.toml (``ragjury.config.JudgeEndpoint``), as --judges
    reads it."""

    @property
    def model(self) -> str: ...

    @property
    def base_url(self) -> str | None: ...


class PanelJudge(BaseModel):
    """One judge of a panel: a name, a model, the endpoint when it is not the run's, and
    whether its calls go through that endpoint's batch API (``--batch-judges``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    name: str
    model: str
    base_url: str | None = None
    batch: bool = False

    @model_serializer(mode="wrap")
    def _stored(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        # a judge without batch is stored as before ``batch`` existed, so its job keeps its key
        dumped: dict[str, object] = handler(self)
        if not self.batch:
            dumped.pop("batch", None)
        return dumped


class Panel(BaseModel):
    """A job's judges and repeats (stored with the job, so a resumed run asks the same)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    judges: tuple[PanelJudge, ...] = Field(min_length=1)
    repeats: int = Field(default=1, ge=1, le=50)
    combine: Combine = "majority"
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)

    @model_validator(mode="after")
    def _distinct_names(self) -> Panel:
        names = [j.name for j in self.judges]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"judge name(s) {', '.join(twice)} given twice; name each judge once")
        return self

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(j.name for j in self.judges)

    def lanes(self) -> list[tuple[str, int]]:
        """Every (judge, repeat) of the panel, in order."""
        return [(j.name, r) for j in self.judges for r in range(self.repeats)]


def parse_judges(
    text: str, declared: Mapping[str, Declared] | None = None
) -> tuple[PanelJudge, ...]:
    """``--judges NAME=MODEL[@BASE_URL],...`` as judges, a bare ``NAME`` being a judge
    ``declared`` in ragjury.toml (``[panel.NAME]``); a clear error naming the bad part."""
    declared = declared or {}
    judges: list[PanelJudge] = []
    for part in (p.strip() for p in text.split(",")):
        name, sep, rest = part.partition("=")
        name, rest = name.strip(), rest.strip()
        if not sep and name in declared:
            found = declared[name]
            if found.base_url:
                _check_stored_url(name, found.base_url)
            judges.append(PanelJudge(name=name, model=found.model, base_url=found.base_url))
            continue
        if not sep or not rest:
            known = (
                f"; the judges declared in ragjury.toml are {', '.join(sorted(declared))}"
                if declared
                else "; or declare it as [panel.NAME] in ragjury.toml and give its NAME"
            )
            raise ValueError(
                f"{part!r} in --judges is not NAME=MODEL[@BASE_URL] nor a declared judge "
                f"({_EXAMPLE}){known}"
            )
        check_judge_name(name, _EXAMPLE)
        model, at, url = rest.partition("@")
        model, url = model.strip(), url.strip()
        if not model or (at and not url.startswith(("http://", "https://"))):
            raise ValueError(
                f"{part!r} in --judges: the endpoint after '@' must be an http(s) URL ({_EXAMPLE})"
            )
        if url:
            _check_stored_url(name, url)
        judges.append(PanelJudge(name=name, model=model, base_url=url or None))
    return tuple(judges)


def with_batch(judges: Sequence[PanelJudge], names: str) -> tuple[PanelJudge, ...]:
    """``--batch-judges NAME,...``: those judges' calls go through the batch API."""
    chosen = {n.strip() for n in names.split(",") if n.strip()}
    known = {j.name for j in judges}
    unknown = sorted(chosen - known)
    if unknown:
        raise ValueError(
            f"--batch-judges names {', '.join(map(repr, unknown))}, which --judges does not "
            f"give (its judges: {', '.join(sorted(known)) or 'none'}); name judges of --judges, "
            "e.g. --judges a=gpt-4o-mini,b=gpt-4o --batch-judges b"
        )
    return tuple(j.model_copy(update={"batch": j.name in chosen}) for j in judges)


def check_judge_name(name: str, example: str) -> None:
    if not _NAME.match(name):
        raise ValueError(
            f"judge name {name!r} must be 1-40 letters, digits, '_' or '-' ({example})"
        )


def _check_stored_url(name: str, url: str) -> None:
    """A judge's endpoint is kept with the job (workers connect to it), so it may hold no
    secret: no user or password, no query string (the error does not repeat them)."""
    parts = urlsplit(url)
    if parts.username or parts.password or parts.query:
        host = parts.hostname or "?"
        raise ValueError(
            f"the endpoint of judge {name!r} (on {host}) has a user, password or query string "
            "in its URL; ragjury keeps each judge's URL with the job, so give the key with "
            "--api-key or OPENAI_API_KEY and the URL without it"
        )


def panel_of(
    judges: Sequence[PanelJudge],
    repeats: int,
    combine: Combine,
    *,
    model: str,
    temperature: float,
) -> Panel | None:
    """The run's panel: None without ``--judges`` and repeats; a panel of the run's own
    model (named ``judge``) for repeats alone. Repeats are asked above temperature 0."""
    if not judges and repeats <= 1:
        return None
    chosen = tuple(judges) or (PanelJudge(name="judge", model=model),)
    if repeats > 1 and temperature == 0:
        temperature = REPEAT_TEMPERATURE
    return Panel(judges=chosen, repeats=repeats, combine=combine, temperature=temperature)


def lane_id(sample_id: str, judge: str, repeat: int) -> str:
    return f"{sample_id}{LANE_MARK}{judge}#{repeat}"


def split_lane(lane: str) -> tuple[str, str, int] | None:
    """``(sample id, judge, repeat)`` of a lane's sample id; None for a sample's own id."""
    base, mark, rest = lane.rpartition(LANE_MARK)
    judge, hash_, repeat = rest.rpartition("#")
    if not mark or not hash_ or not repeat.isdigit():
        return None
    return base, judge, int(repeat)
