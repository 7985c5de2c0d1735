"""Settings: defaults, then ``ragjury.toml``, then ``RAGJURY_*`` variables, then CLI flags.

Only the CLI and ``main.py`` build :class:`Settings` from the environment
(:meth:`Settings.from_environment`); library users pass a ``Settings`` they built themselves.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from ragjury.pricing import ModelPrice
from ragjury.schemas.panel import PanelJudge, check_judge_name
from ragjury.schemas.records import QUESTION_TYPES, Persona, without_defaults

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
StructuredMode = Literal["json", "tools", "json_schema", "md_json"]
AnswerStyle = Literal["factoid", "detailed"]
OutputFormat = Literal["jsonl", "csv", "parquet"]


class GenerationOptions(BaseModel):
    """What shapes a dataset-generation run (the ``[generate]`` table of ragjury.toml)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    questions_per_chunk: int = Field(default=1, ge=1, le=20)
    chunk_size: int = Field(default=2000, ge=100)
    chunk_overlap: int = Field(default=200, ge=0)
    whole_documents: bool = False
    answer_style: AnswerStyle = "factoid"
    audience: str = "users of these documents"
    min_score: int = Field(default=4, ge=1, le=5)
    dedup_threshold: float = Field(
        default=0.9,
        ge=0.0,
        le=1.0,
        description="Similarity at or above which a question is a duplicate.",
    )
    globs: tuple[str, ...] | None = None
    text_field: str = "text"
    id_field: str | None = None
    question_types: dict[str, float] = Field(
        default_factory=lambda: {"factoid": 1.0},
        description="Relative weight of each question type (factoid, reasoning, multi_hop, "
        "comparative); each chunk draws one. Also 'factoid=0.5,multi_hop=0.5'.",
    )
    seed: int = Field(
        default=0, description="Seeds each chunk's draw of its question type and persona."
    )
    personas: tuple[Persona, ...] = Field(
        default=(),
        description="Who asks the questions: each chunk's questions are drafted for one of "
        "them, and the relevance critic judges them for that persona (``--personas``).",
    )
    reference_answers: bool = Field(
        default=False,
        description="Write a complete, self-contained reference answer for each kept pair.",
    )
    max_pairs: int | None = Field(
        default=None,
        ge=1,
        description="Draft at most this many pairs, from chunks spread over the documents, "
        "question types and personas.",
    )
    answer_check: bool = Field(
        default=True,
        description="The answerability critic answers each question from its contexts alone "
        "and a pair whose answer it cannot reproduce is rejected (--no-answer-check: off).",
    )
    multi_hop_strict: bool = Field(
        default=False,
        description="Reject a multi-hop question that one of its chunks answers alone, "
        "instead of retyping it to a factoid of that chunk.",
    )

    @model_serializer(mode="wrap")
    def _added_fields_when_used(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        # a job keeps its options: one that uses none of these stores what earlier versions
        # did. answer_check is always stored: a stored job without it predates the check
        # (see GenerationSpec), so a job with the check on is a new job
        return without_defaults(
            self,
            handler,
            (
                "question_types",
                "seed",
                "personas",
                "reference_answers",
                "max_pairs",
                "multi_hop_strict",
            ),
        )

    @property
    def typed(self) -> bool:
        """Whether any question but factoids is drafted (each record then says its type)."""
        return set(self.question_types) != {"factoid"}

    @field_validator("question_types", mode="before")
    @classmethod
    def _weights(cls, value: object) -> dict[str, float]:
        return question_weights(value)

    @field_validator("personas")
    @classmethod
    def _distinct_personas(cls, value: tuple[Persona, ...]) -> tuple[Persona, ...]:
        names = [persona.name for persona in value]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(
                f"persona name {twice[0]!r} is given more than once; give each persona its own name"
            )
        return value

    @model_validator(mode="after")
    def _enough_pairs_for_a_chunk(self) -> GenerationOptions:
        if self.max_pairs is not None and self.max_pairs < self.questions_per_chunk:
            raise ValueError(
                f"max_pairs ({self.max_pairs}) is below questions_per_chunk "
                f"({self.questions_per_chunk}): a chunk drafts {self.questions_per_chunk} "
                "pairs; raise --max-pairs or lower --questions-per-chunk"
            )
        return self

    @model_validator(mode="after")
    def _overlap_below_size(self) -> GenerationOptions:
        if self.chunk_overlap >= self.chunk_size:
            raise ValueError(
                f"chunk_overlap must be smaller than chunk_size, got overlap={self.chunk_overlap} "
                f"and size={self.chunk_size}; lower --chunk-overlap or raise --chunk-size"
            )
        return self


def question_weights(value: object) -> dict[str, float]:
    """``--question-types`` (``factoid=0.5,multi_hop=0.5``, or a mapping from ragjury.toml)
    as weights by type, the types of weight 0 left out; factoid alone is ``{"factoid": 1}``.
    """
    known = ", ".join(QUESTION_TYPES)
    example = "e.g. factoid=0.5,reasoning=0.2,multi_hop=0.2,comparative=0.1"
    if isinstance(value, str):
        pairs: list[tuple[str, object]] = []
        for part in (p.strip() for p in value.split(",")):
            name, sep, weight = part.partition("=")
            if not sep or not name.strip() or not weight.strip():
                raise ValueError(
                    f"{part!r} in {value!r} is not TYPE=WEIGHT; give TYPE=WEIGHT pairs "
                    f"separated by commas ({example}); the types are {known}"
                )
            pairs.append((name.strip(), weight.strip()))
    elif isinstance(value, Mapping):
        pairs = [(str(name), weight) for name, weight in value.items()]
    else:
        raise ValueError(
            f"expected TYPE=WEIGHT pairs ({example}), got {value!r}; the types are {known}"
        )
    weights: dict[str, float] = {}
    for kind, given in pairs:
        if kind not in QUESTION_TYPES:
            raise ValueError(f"unknown question type {kind!r}; the types are {known}")
        if kind in weights:
            raise ValueError(
                f"question type {kind!r} is given twice in {value!r}; give each once "
                f"(the types are {known})"
            )
        try:
            number = float(given) if isinstance(given, int | float | str) else math.nan
        except ValueError:
            number = math.nan
        if isinstance(given, bool) or not math.isfinite(number) or number < 0:
            raise ValueError(
                f"the weight of {kind} must be a number >= 0, got {given!r} ({example}; "
                f"the types are {known})"
            )
        weights[kind] = number
    chosen = {name: w for name, w in weights.items() if w > 0}
    if not chosen:
        raise ValueError(
            f"at least one question type needs a weight above 0, got {value!r} ({example}); "
            f"the types are {known}"
        )
    if set(chosen) == {"factoid"}:
        return {"factoid": 1.0}
    return {name: chosen[name] for name in QUESTION_TYPES if name in chosen}


class EvaluationOptions(BaseModel):
    """What shapes an answer-evaluation run (the ``[evaluate]`` table of ragjury.toml)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    metrics: tuple[str, ...] | None = Field(
        default=None,
        description="Metric names (or a group such as 'rag_triad'); None: each metric that "
        "its declaration chooses for what the samples fill (faithfulness, plus correctness "
        "where references exist, ...). `ragjury metrics` lists them.",
    )
    thresholds: dict[str, float] = Field(
        default_factory=dict,
        description="Pass marks by metric, over each metric's default (checked against the "
        "metric's scale when a job is built). ``<metric>_threshold = X`` is read as "
        "``thresholds[<metric>] = X``.",
    )
    verdict_batch: int = Field(default=8, ge=1, le=100)
    context_window_chars: int = Field(default=12000, ge=500)
    case_sensitive: bool = False
    k: tuple[int, ...] = Field(
        default=(1, 3, 5, 10),
        min_length=1,
        description="Cut-offs of the retrieval figures (hit rate, MRR, recall, precision, nDCG).",
    )

    @model_validator(mode="before")
    @classmethod
    def _named_thresholds(cls, data: Any) -> Any:
        """``faithfulness_threshold = 0.9`` (ragjury.toml, ``--faithfulness-threshold``, a job
        stored by an earlier version) is ``thresholds["faithfulness"] = 0.9``."""
        if not isinstance(data, dict):
            return data
        named = {k: v for k, v in data.items() if k.endswith("_threshold")}
        if not named:
            return data
        rest = {k: v for k, v in data.items() if k not in named}
        thresholds = dict(rest.get("thresholds") or {})
        for key, value in named.items():
            if value is not None:
                thresholds[key.removesuffix("_threshold")] = value
        return {**rest, "thresholds": thresholds}

    @field_validator("k")
    @classmethod
    def _cutoffs(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if any(k < 1 for k in value):
            raise ValueError(f"every k must be >= 1, got {list(value)}; e.g. --k 1,3,5,10")
        return tuple(sorted(set(value)))


class JudgeEndpoint(BaseModel):
    """A judge declared in ragjury.toml (``[panel.NAME]``): its model and endpoint, and what
    its endpoint allows (requests in flight, per minute, tokens per minute), the variable
    holding its key and its price. ``--judges NAME`` asks it; the limits are read by the
    process that makes the calls (an ``evaluate``, a ``serve`` worker) from its own
    settings, as the run's own concurrency is, so only the name, model and URL go with
    the job."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(min_length=1, description="Chat model name at the judge's endpoint.")
    base_url: str | None = Field(
        default=None, description="The judge's endpoint; None: the run's (--base-url)."
    )
    api_key_env: str | None = Field(
        default=None,
        description="The environment variable holding the judge's API key; None: the run's.",
    )
    concurrency: int | None = Field(
        default=None, ge=1, description="Requests in flight at the judge at once, at most."
    )
    rpm: int | None = Field(default=None, ge=1, description="Requests per minute, at most.")
    tpm: int | None = Field(default=None, ge=1, description="Tokens per minute, at most.")
    price: ModelPrice | None = Field(
        default=None,
        description="USD per million tokens at this endpoint, e.g. { input = 0, output = 0 } "
        "for a model of your own; None: the price of the model (built-in or [prices]).",
    )

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"base_url must be an http(s) URL, got {value!r}")
        return value

    @field_validator("api_key_env")
    @classmethod
    def _variable_name(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_NAME.match(value):
            raise ValueError(
                "api_key_env names the environment variable holding the key (letters, digits "
                'and _, e.g. "LLAMA_API_KEY"), not the key: the key itself never goes in '
                "ragjury.toml"
            )
        return value

    def serves(self, judge: PanelJudge, run_base_url: str | None) -> bool:
        """Whether ``judge`` (as a job keeps it) is this declaration: same model and endpoint,
        so its key and limits may be used for it."""
        return judge.model == self.model and (judge.base_url or run_base_url) == (
            self.base_url or run_base_url
        )


class Settings(BaseSettings):
    """Everything a run needs to know about its LLM endpoint, workers and storage."""

    model_config = SettingsConfigDict(
        env_prefix="RAGJURY_",
        toml_file="ragjury.toml",
        extra="ignore",
        populate_by_name=True,
        frozen=True,
    )

    model: str = Field(default="gpt-4o-mini", description="Chat model name at the endpoint.")
    base_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("base_url", "RAGJURY_BASE_URL", "OPENAI_BASE_URL"),
    )
    api_key: str | None = Field(
        default=None,
        validation_alias=AliasChoices("api_key", "RAGJURY_API_KEY", "OPENAI_API_KEY"),
        repr=False,
    )
    llm: str | None = Field(
        default=None,
        description="'openai', 'local' (the bundled model) or 'local:/path/to/model.gguf'; "
        "None: an endpoint if one is configured, else the bundled model if installed.",
    )
    local_context: int = Field(default=4096, ge=256, description="Local model context, tokens.")
    local_threads: int | None = Field(
        default=None, ge=1, description="CPU threads of the local model; None: every core."
    )
    local_max_tokens: int = Field(
        default=512, ge=16, description="Longest local completion, tokens."
    )
    concurrency: int = Field(default=8, ge=1, description="Requests in flight at once, at most.")
    rpm: int | None = Field(default=None, ge=1, description="Requests per minute, at most.")
    tpm: int | None = Field(default=None, ge=1, description="Tokens per minute, at most.")
    max_tokens: int | None = Field(
        default=None, ge=1, description="Budget: stop taking new work after this many tokens."
    )
    max_cost: float | None = Field(
        default=None, gt=0, description="Budget: stop taking new work after this many USD."
    )
    prices: dict[str, ModelPrice] = Field(
        default_factory=dict, description="USD per million tokens by model, over the built-in."
    )
    max_retries: int = Field(default=3, ge=0, description="Re-asks when output does not validate.")
    max_transport_retries: int = Field(
        default=6, ge=0, description="Retries of 429, 5xx, timeouts and connection errors."
    )
    max_throttle_wait: float = Field(
        default=600.0,
        gt=0,
        description="Seconds one call may spend waiting out 429s (rate limits); they use "
        "none of its --max-transport-retries.",
    )
    timeout: float = Field(default=120.0, gt=0, description="Seconds per request.")
    batch: bool = Field(
        default=False,
        description="Send LLM calls through the endpoint's batch API (about half price, "
        "answers within hours); the asking steps wait in the store, holding no worker.",
    )
    batch_size: int = Field(default=1000, ge=1, description="Requests per batch, at most.")
    batch_wait: float = Field(
        default=60.0, ge=0, description="Seconds a queued request waits for a fuller batch."
    )
    batch_poll: float = Field(
        default=30.0, gt=0, description="Seconds between polls of a batch (backing off)."
    )
    batch_reask: Literal["batch", "direct"] = Field(
        default="batch",
        description="Where a re-ask (an answer that did not validate) goes: the next batch, "
        "or straight to the endpoint.",
    )
    max_prompt_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Largest prompt sent, in (estimated) tokens; default: the model's context "
        "where known, else 128,000.",
    )
    backoff_base: float = Field(default=0.5, gt=0, description="First backoff delay, seconds.")
    backoff_max: float = Field(default=30.0, gt=0, description="Longest backoff delay, seconds.")
    mode: StructuredMode = "json"
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    logprobs: bool = Field(default=False, description="Ask judges' endpoints for logprobs.")
    embedding_model: str = Field(default="text-embedding-3-small")
    workers: dict[str, int] = Field(
        default_factory=dict, description="Workers per agent role, e.g. {'generator': 4}."
    )
    bus_buffer: int = Field(default=16, ge=1)
    db: str = Field(
        default="ragjury.db",
        description="Where the store lives: a SQLite file path (or a postgresql:// URL).",
    )
    cache: bool = Field(default=True, description="Reuse finished agent steps from the db.")
    db_reconnect: float = Field(
        default=600.0,
        gt=0,
        description="Seconds a run keeps trying to reach a PostgreSQL database it lost before "
        "it stops (exit 7); what finished is stored and the rest stays queued.",
    )
    lease_seconds: float = Field(
        default=30.0,
        gt=0,
        description="How long a claimed message or item stays a worker's without renewal.",
    )
    max_deliveries: int = Field(
        default=5,
        ge=1,
        description="Deliveries of one message (its handler raised, or its worker died) "
        "before it is taken out and its item fails.",
    )
    grace: float = Field(
        default=30.0, ge=0, description="Seconds in-flight items get to finish on shutdown."
    )
    poll_interval: float = Field(default=0.5, gt=0, description="Seconds between queue polls.")
    items_in_flight: int | None = Field(
        default=None, ge=1, description="Items a daemon holds at once (default 2 x concurrency)."
    )
    log_level: str = "warning"
    otel: bool = Field(
        default=False,
        description="Trace every handled message, LLM call and finished item with "
        "OpenTelemetry (the otel extra); the command line also turns it on when "
        "OTEL_EXPORTER_OTLP_ENDPOINT is set.",
    )
    judges: tuple[str, ...] = Field(
        default=(),
        description="Judge files (TOML) whose metrics every evaluation may ask for; "
        "``--judge FILE`` adds more.",
    )
    panel: dict[str, JudgeEndpoint] = Field(
        default_factory=dict,
        description="Judges by name (``[panel.NAME]`` tables: model, base_url, api_key_env, "
        "concurrency, rpm, tpm, price), each asked with ``--judges NAME,...``.",
    )
    generate: GenerationOptions = GenerationOptions()
    evaluate: EvaluationOptions = EvaluationOptions()

    @field_validator("panel")
    @classmethod
    def _judge_names(cls, value: dict[str, JudgeEndpoint]) -> dict[str, JudgeEndpoint]:
        for name in value:
            check_judge_name(name, "e.g. [panel.llama]")
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls))

    @classmethod
    def from_environment(cls, **overrides: Any) -> Settings:
        """Defaults < ragjury.toml < RAGJURY_* / OPENAI_* variables < ``overrides`` (CLI flags)."""
        return cls(**{k: v for k, v in overrides.items() if v is not None})

    @property
    def db_shown(self) -> str:
        """``db`` as messages may show it: a URL's password redacted."""
        from ragjury.urls import redacted

        return redacted(self.db)

    @field_validator("db", mode="before")
    @classmethod
    def _db_location(cls, value: Any) -> Any:
        return str(value) if isinstance(value, Path) else value

    @field_validator("db", "base_url")
    @classmethod
    def _url_secrets_known(cls, value: str | None) -> str | None:
        """Where these URLs enter: their passwords are hidden in any text from here on."""
        from ragjury.urls import remember_secrets

        return remember_secrets(value)

    @field_validator("llm")
    @classmethod
    def _llm_spec(cls, value: str | None) -> str | None:
        if value is None or value in ("openai", "local") or value.startswith("local:"):
            return value
        raise ValueError(
            "must be 'openai', 'local' or 'local:/path/to/model.gguf'; leave it unset to use "
            "the configured endpoint, else the bundled local model"
        )
