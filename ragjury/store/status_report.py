"""The ``ragjury status --json`` document, as :func:`ragjury.store._status.status` builds it."""

from __future__ import annotations

from typing import NotRequired, TypedDict


class JobStatus(TypedDict):
    id: str
    kind: str
    created_at: str
    queued: int
    processing: int
    done: int
    failed: int
    stored_in_full: bool
    """False while the run storing the job's samples stopped before it had stored them all
    (a job judged as it is stored, killed meanwhile): the same command stores the rest."""


class StageUse(TypedDict):
    """LLM use of one stage (an agent's calls), and its steps in the cache."""

    llm_calls: int
    prompt_tokens: int
    completion_tokens: int
    structured_calls: NotRequired[int]
    failed_calls: NotRequired[int]
    cached_steps: NotRequired[int]


class TokenTotals(TypedDict):
    prompt: int
    completion: int


class Throughput(TypedDict):
    items_done_last_minute: int
    items_per_minute: float | None


class WorkerStatus(TypedDict):
    owner: str
    host: str
    pid: int
    agents: list[str]
    messages_held: int
    items_held: int
    seconds_since_heartbeat: float
    live: bool


class AgentStatus(TypedDict):
    messages_waiting: int
    served: bool


class BatchStatus(TypedDict):
    job: str
    batch: str | None
    status: str
    requests: int
    age_seconds: float


class StatusReport(TypedDict):
    db: str
    queued: int
    processing: int
    """Items claimed by an intake or with messages on the bus."""
    done: int
    failed: int
    jobs: list[JobStatus]
    stages: dict[str, StageUse]
    tokens: TokenTotals
    throughput: Throughput
    daemons: list[WorkerStatus]
    agents: dict[str, AgentStatus]
    waiting_for_workers: list[str]
    batches: list[BatchStatus]
