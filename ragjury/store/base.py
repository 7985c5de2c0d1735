"""The store interface: everything ragjury keeps, behind methods that yield no driver objects.

A store holds the jobs and their items (the intake queue), the messages of the durable bus
(claimed under leases on the database's clock), the join state of the aggregating agents
(atomic per item), the items' results, the step cache, every LLM call and the workers that
are running. Each role is a small protocol (:class:`Queue`, :class:`Mailbox`,
:class:`Joins`, :class:`Results`, :class:`CallLog`, :class:`Workers`) and a caller depends on
the one it uses; :class:`Store` is all of them on one database.
:class:`~ragjury.store.sqlite.SQLiteStore` and :class:`~ragjury.store.postgres.PostgresStore`
implement them with one SQL core (:mod:`ragjury.store.sql`); ``tests/store_contract.py`` is
the suite both must pass.

Item states: ``queued`` -> ``processing`` (claimed by an intake, under a lease, until its
first messages are published) -> ``running`` (its messages are on the bus) -> ``done`` or
``failed``. Users see ``processing`` for both of the middle states.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal, Protocol, TypedDict

from pydantic import BaseModel

from ragjury._json import JSONData, JSONObject
from ragjury.llm.batch_types import BatchLedger
from ragjury.llm.usage import CallStats
from ragjury.store.decisions import QuestionDecision as QuestionDecision
from ragjury.store.status_report import StatusReport

JobKind = Literal["generate", "evaluate"]
STATES: tuple[str, ...] = ("queued", "processing", "done", "failed")


@dataclass(frozen=True)
class Job:
    id: str
    kind: JobKind
    options: JSONObject
    created: bool = False
    """True when this call created the job; False when an identical job already existed."""
    size: int = 0
    """How many items the job has."""
    retried: int = 0
    """Finished items put back in the queue because an LLM step of theirs failed at the
    endpoint (see :attr:`ItemResults.transient_failures`)."""
    ended: int = 0
    """Items this call stored ended already, with their results (see :data:`ItemEnds`)."""


@dataclass(frozen=True)
class RunRecord:
    """A command's run as stored: its settings (no secret in them) and, once it finished,
    its summary (what the command's ``--summary`` holds)."""

    id: str
    command: str
    started_at: str
    finished_at: str | None
    settings: JSONObject
    summary: JSONObject | None


@dataclass(frozen=True)
class Item:
    """One document or sample of a job, as the intake claimed it."""

    id: int
    job_id: str
    key: str
    position: int
    stored: str
    """The payload's JSON text, as stored: a pipeline that reads it as a model parses it
    in one pass (``model_validate_json``), not as a dict first."""
    attempts: int

    @cached_property
    def payload(self) -> JSONObject:
        """The payload, parsed (once); TypeError when it is not a JSON object."""
        from ragjury.store._common import decode_payload  # (that module imports this one)

        return decode_payload(self.stored)


@dataclass(frozen=True)
class ItemResults:
    """What finishing an item stores: export records (pairs or samples) and a report."""

    pairs: Sequence[Mapping[str, JSONData]] = ()
    samples: Sequence[tuple[Mapping[str, JSONData], str]] = ()
    """(export record, SampleScored JSON) per sample."""
    report: Mapping[str, JSONData] | None = None
    transient_failures: int = 0
    """Failure records that say the endpoint failed, not the model. When the same job is
    submitted again, an item with any is done again, its other steps from the cache."""


@dataclass(frozen=True)
class StoredMessage:
    """A message of the durable bus as a worker claimed it."""

    id: int
    group: str
    body: str
    """The envelope as JSON."""
    attempts: int
    job_id: str
    item_key: str
    step: str | None = None
    """The step cache's output for it, when it was looked up as it was put (``step_key``)."""
    step_key: str = ""
    """The key ``step`` was looked up by ('': not looked up; then ``step`` is None)."""
    call: int | None = None
    """The in-flight record of its step's first LLM call, opened as it was put leased
    (PostgreSQL, for a step not in the cache, when the lease names a run): the call takes it
    rather than opening one, and the acknowledgement drops it if no call took it."""
    joined: str | None = None
    """Its item's join parts (a JSON object) as they were when it was put leased by an
    acknowledgement (PostgreSQL; None: not read): see :data:`ragjury.agents.joins.seen_joins`."""


@dataclass(frozen=True)
class OutgoingMessage:
    """A message to put on the durable bus: one row per receiving group."""

    group: str
    kind: str
    job_id: str
    item_key: str
    body: str
    leased: bool = False
    """Put already leased to the putting process (its worker of ``group`` is idle), and
    returned to it, so that no claim is needed to take it."""
    step_key: str = ""
    """For a leased message: its step's key in the step cache, looked up as it is put
    ('': no lookup)."""
    joins: bool = False
    """For a leased message: its step may complete its item's join, so the store may return
    it with its item's join state (:attr:`StoredMessage.joined`)."""


@dataclass(frozen=True)
class Lease:
    """Who takes the leased messages a put returns, and for how long (the bus's owner and
    lease)."""

    owner: str
    seconds: float
    run_id: str = ""
    """The run whose books the owner's LLM calls are on ('': none). A store may open the
    first call's in-flight record of each leased message whose step is not cached under this
    run as it puts it (:attr:`StoredMessage.call`), saving the call a statement of its own."""


@dataclass(frozen=True)
class StepWrites:
    """What handling a message stores besides its replies, in the same transaction as its
    acknowledgement: its step's output for the step cache (key, agent, output JSON) and the
    closing records of the LLM calls it made (each opened by :meth:`CallLog.open_call`)."""

    step: tuple[str, str, str] | None = None
    calls: Sequence[tuple[CallStats, str | None]] = ()
    end: tuple[str, str, ItemResults] | None = None
    """(job, item, results): the handling made the item's terminal event; the item ends
    ``done`` with these results in the same transaction, unless it has ended already."""
    unused_calls: Sequence[int] = ()
    """In-flight records opened for the step (:attr:`StoredMessage.call`) that no call
    took: dropped."""


@dataclass(frozen=True)
class Acked:
    """What an acknowledgement did: the replies it put leased to the acknowledging process,
    and whether it ended the item (None: no end was asked)."""

    leased: list[StoredMessage] = field(default_factory=list)
    ended: bool | None = None


@dataclass
class Claim:
    """What one claim of messages returned."""

    messages: list[StoredMessage] = field(default_factory=list)
    dead: int = 0
    """Messages taken out at this claim: delivered ``max_attempts`` times and never
    acknowledged (each killed or crashed its worker); their items were failed."""


class CallTotals(TypedDict):
    """LLM use as the call records add it up."""

    llm_calls: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    """None when a call's cost is unknown (a model without a price)."""
    cost_known_usd: float
    """The cost of the calls whose cost is known."""


class FailedItem(TypedDict):
    item: str
    error: str


ItemsFactory = Callable[[], Iterable[tuple[str, BaseModel | Mapping[str, JSONData] | str]]]
"""A function returning a fresh iterator of a job's items: (key, payload stored as JSON). A
payload given as a string is the JSON text of an object, made already (by
``BaseModel.model_dump_json`` for a model, so the job's key is the same): stored as it is."""


ItemEnds = Callable[[str, str], "ItemResults | None"]
"""(item key, payload as stored) -> the item's results, for items that end where they are
taken in (a job that calls no LLM and no RAG target): such an item is stored ``done`` with
its results, in the transaction that stores it, never claimed. None: it is stored queued (its
start needs more than the item itself, or failed: the runner starts it, and says why).
Called in the store's own thread, and again for every item if the store runs the
transaction again (a lost connection): what it returns depends on its arguments alone."""


class QuestionMatcher(Protocol):
    """How the deduplicator indexes and decides questions (``ragjury.agents.question_index``)."""

    @property
    def signature(self) -> str:
        """What its keys depend on (threshold, word order): keys stored under another
        signature are made again."""
        ...

    def keys(self, question: str) -> list[str]:
        """The keys a kept question is stored under; every kept question a drafted one
        could repeat shares one of the drafted one's keys."""
        ...

    def decide(
        self, candidates: Sequence[tuple[int, str, str]], pairs: Sequence[tuple[str, str]]
    ) -> list[QuestionDecision]:
        """(the kept questions found by the pairs' keys as (row, pair id, question), the
        pairs to decide as (pair id, question)) -> a decision per pair, in order."""
        ...


class CallLog(Protocol):
    """Runs, the LLM calls they made, the step cache and the shared rate buckets: what the
    LLM layer and the commands record."""

    async def now(self) -> float:
        """The database's clock, in seconds since the epoch (leases are measured on it)."""
        ...

    async def take_rate(
        self,
        key: str,
        amount: float,
        *,
        per_second: float,
        capacity: float,
        at_most: float | None = None,
    ) -> float:
        """Take ``amount`` from the shared token bucket ``key`` and return the seconds to wait
        before using it: what every process on this database draws an endpoint's rate from.

        Atomically, on the database's clock: a bucket met for the first time starts full
        (``capacity``); it refills at ``per_second`` since its last use, up to ``capacity``;
        it is lowered to ``at_most`` when given (never raised: what an endpoint's headers say
        remains); ``amount`` is taken (a negative amount gives back, up to ``capacity``). The
        level may go below zero, a reservation ahead of the refill: the answer is how long
        until it is back at zero (``-level / per_second``), 0 when the amount was there. The
        caller's ``per_second`` and ``capacity`` are the bucket's for this call."""
        ...

    async def start_run(self, command: str, settings: Mapping[str, JSONData]) -> str: ...

    async def finish_run(self, run_id: str, summary: Mapping[str, JSONData]) -> None: ...

    async def note_run_job(self, run_id: str, job_id: str) -> None:
        """Note the job an unfinished run works on, so that if its process is killed, the
        calls it made still count in the job's totals."""
        ...

    async def open_call(self, run_id: str, stats: CallStats) -> int:
        """Record a call as it is sent (in flight); its record, for :meth:`record_call`."""
        ...

    async def record_call(self, run_id: str, stats: CallStats, error: str | None) -> None:
        """Record a finished call (updating its in-flight record, if it has one)."""
        ...

    async def close_calls(
        self, calls: Sequence[tuple[CallStats, str | None]], *, unused: Sequence[int] = ()
    ) -> None:
        """Record finished calls whose in-flight records :meth:`open_call` made, at once, and
        drop the ``unused`` in-flight records opened ahead of calls never made
        (:attr:`StoredMessage.call`)."""
        ...

    async def call_totals(
        self, *, run_id: str | None = None, since: float | None = None
    ) -> CallTotals:
        """Requests, tokens and cost of a run's calls, or of every call recorded since the
        time ``since`` (all processes: what a shared budget counts)."""
        ...

    async def job_runs(self, job_id: str) -> list[RunRecord]:
        """Every finished run that worked on ``job_id``, oldest first."""
        ...

    async def latest_run(self, job_id: str) -> RunRecord | None:
        """The newest finished run that worked on ``job_id`` (its summary names the job), or
        None."""
        ...

    async def get_step(self, key: str) -> str | None: ...

    async def put_step(self, key: str, agent: str, output: str) -> None: ...


class Queue(Protocol):
    """Jobs and their items: what entry points submit and the runner's intake claims."""

    async def submit(
        self,
        kind: JobKind,
        options: Mapping[str, JSONData],
        items: ItemsFactory,
        *,
        batch: int = 500,
        batch_bytes: int = 4 * 1024 * 1024,
        ends: ItemEnds | None = None,
        told: Callable[[str], None] | None = None,
    ) -> Job:
        """Create a job of ``items`` ((key, payload) in order; a function returning a fresh
        iterator, read twice) or find the identical one (then put back its items that
        finished with endpoint failures). With ``ends``, each item of a new job is stored
        ended where ``ends`` gives its results (:attr:`Job.ended` counts them), committed a
        chunk of items at a time: a run killed meanwhile keeps the chunks committed (the job
        under a key that says it is unfinished), and the same submission stores and ends only
        the rest, in the same job (``created`` False). ``told`` is called with the job's
        id each time items ``ends`` ended are committed."""
        ...

    async def job(self, job_id: str) -> Job:
        """The job ``job_id`` (``KeyError`` if there is none)."""
        ...

    async def jobs(self, *, limit: int | None = None) -> list[Job]:
        """The jobs, newest first (each with its ``size``); at most ``limit`` of them."""
        ...

    async def claim_items(
        self,
        owner: str,
        limit: int,
        *,
        lease_seconds: float,
        job_ids: Sequence[str] | None = None,
        max_attempts: int = 5,
    ) -> list[Item]:
        """Take up to ``limit`` queued items (or items whose intake lease ran out); an item
        taken ``max_attempts`` times without starting is failed instead."""
        ...

    async def items_started(self, item_ids: Sequence[int]) -> None:
        """The items' first messages are on the bus: they no longer need an intake lease."""
        ...

    async def release_items(self, owner: str, item_ids: Sequence[int]) -> int:
        """Put claimed items that were never started back in the queue."""
        ...

    async def unfinished_items(self, owner: str) -> int:
        """Items this owner started that are not done or failed (its intake's in-flight)."""
        ...

    async def finish_item(self, job_id: str, key: str, results: ItemResults) -> bool:
        """Store the results and mark the item done, unless it is done already (False)."""
        ...

    async def fail_item(
        self, job_id: str, key: str, error: str, results: ItemResults | None = None
    ) -> bool:
        """Mark the item failed with ``error`` (and any results), unless it is finished."""
        ...

    async def counts(self, job_ids: Sequence[str] | None = None) -> dict[str, int]: ...

    async def unfinished(self, job_ids: Sequence[str] | None = None) -> int: ...

    async def item_payload(self, job_id: str, key: str) -> JSONObject | None:
        """The submitted document or sample of an item."""
        ...

    def item_payloads(self, job_id: str) -> AsyncIterator[tuple[str, JSONObject]]:
        """Every item of a job as (key, submitted payload), in the order they were
        submitted, a page at a time."""
        ...


class Results(Protocol):
    """What finished items left, for outputs and reports."""

    def reports(self, job_id: str) -> AsyncIterator[JSONObject]:
        """The reports of a job's ended items, in item order, a page at a time."""
        ...

    async def failed_items(self, job_id: str) -> list[FailedItem]: ...

    async def pair_outcomes(self, job_id: str) -> dict[str, int]: ...

    def pairs(self, job_ids: Sequence[str] | None = None) -> AsyncIterator[JSONObject]: ...

    def samples(self, job_ids: Sequence[str] | None = None) -> AsyncIterator[JSONObject]: ...

    def sample_texts(self, job_id: str) -> AsyncIterator[str]:
        """A job's sample records as stored (the JSON that ``json.dumps(record,
        ensure_ascii=False)`` made), in input order: a JSONL output copies them unparsed."""
        ...

    def scored(self, job_id: str) -> AsyncIterator[str]:
        """The SampleScored JSON of a job's samples, in input order."""
        ...


class Mailbox(Protocol):
    """The durable bus's messages."""

    async def put_messages(
        self,
        messages: Sequence[OutgoingMessage],
        *,
        lease: Lease | None = None,
        started: Sequence[int] = (),
        joins: Sequence[tuple[str, str, Mapping[str, str]]] = (),
    ) -> list[StoredMessage]:
        """Put ``messages`` on the bus; the ones marked ``leased`` come back leased to
        ``lease.owner``. ``started``: items whose first messages these are, marked running
        (:meth:`Queue.items_started`) in the same transaction; ``joins``: (job, item, parts)
        added to the items' join state (:meth:`Joins.join`) in it too, before the messages
        can be seen."""
        ...

    async def claim_messages(
        self,
        owner: str,
        groups: Sequence[str],
        limit: int,
        *,
        lease_seconds: float,
        max_attempts: int,
        job_ids: Sequence[str] | None = None,
    ) -> Claim: ...

    async def claimed_steps(
        self, messages: Sequence[tuple[str, str]], *, run_id: str = ""
    ) -> list[tuple[str | None, int | None]]:
        """For claimed messages, one (group, step key) each: its step's cached output (None:
        not cached) and, under ``run_id``, the in-flight record of its step's first LLM call
        opened for it if its step is not cached (:attr:`StoredMessage.call`, as a message
        put leased comes with), in their order, together (one statement on PostgreSQL)."""
        ...

    async def ack_message(
        self,
        message_id: int,
        replies: Sequence[OutgoingMessage],
        writes: StepWrites | None = None,
        *,
        lease: Lease | None = None,
    ) -> Acked:
        """Put ``replies`` on the bus and remove the message, in one transaction, with
        ``writes``; the replies marked ``leased`` come back leased to ``lease.owner``."""
        ...

    async def nack_message(
        self, message_id: int, error: str, *, max_attempts: int, retry_after: float
    ) -> bool:
        """The handler failed: offer the message again after ``retry_after`` seconds, or, once
        it has been delivered ``max_attempts`` times, take it out (True: the caller fails its
        item). Messages found at a claim already delivered ``max_attempts`` times (their
        workers died) are taken out there, and their items failed by the store."""
        ...

    async def renew_messages(
        self, owner: str, message_ids: Sequence[int], lease_seconds: float
    ) -> None: ...

    async def release_messages(
        self,
        owner: str,
        message_ids: Sequence[int],
        *,
        started: bool = False,
        calls: Sequence[int] = (),
    ) -> None:
        """Give back messages this owner holds (a clean stop), at once. Those whose handler
        never ``started`` get back the attempt their claim counted; a started one keeps it,
        so a message that keeps failing reaches the delivery limit however it ends. ``calls``:
        the in-flight records opened for them (:attr:`StoredMessage.call`), dropped."""
        ...

    async def waiting_messages(self) -> dict[str, int]:
        """Messages not yet acknowledged, per group."""
        ...

    async def claimable_groups(
        self, groups: Sequence[str], job_ids: Sequence[str] | None = None
    ) -> set[str]:
        """Which of ``groups`` have messages a claim would take now (of ``job_ids``' jobs;
        all jobs when None), in one query: what idle workers ask before they claim."""
        ...


class Joins(Protocol):
    """Join state per item, for the aggregating agents, and the deduplicator's decisions."""

    async def join(
        self, job_id: str, item_key: str, parts: Mapping[str, str], prefix: str
    ) -> dict[str, str]:
        """Add ``parts`` (name -> value; a name already present keeps its first value) to the
        item's join state and return the parts whose names start with ``prefix`` (a
        non-empty string), atomically."""
        ...

    async def decide_questions(
        self,
        job_id: str,
        pairs: Sequence[tuple[str, str]],
        matcher: QuestionMatcher,
    ) -> list[QuestionDecision]:
        """The deduplicator's step, serialised per job across processes: decisions already
        stored for these pairs are returned as they were; the others are decided by
        ``matcher`` against the job's kept questions their keys find in the store's index
        of them, and stored, the kept ones indexed under their keys. A job whose kept
        questions were indexed under another ``matcher.signature`` (or not at all: a
        database from before the index) is indexed again first."""
        ...


class Workers(Protocol):
    """The worker processes on a database, its status and its upkeep."""

    async def register_worker(self, owner: str, agents: Sequence[str]) -> int:
        """Record a running worker process; release what dead processes of this host held
        (the number of messages and items released)."""
        ...

    async def heartbeat(self, owner: str) -> None: ...

    async def unregister_worker(self, owner: str) -> None: ...

    async def status(self) -> StatusReport:
        """The ``ragjury status --json`` document."""
        ...

    async def prune(self, before: float) -> dict[str, int]:
        """Delete what ended before the time ``before``: jobs whose every item finished then
        (with their items and results), cached steps and run and call records made then.
        Unfinished jobs are kept whole. Returns the rows deleted per table."""
        ...

    async def compact(self) -> None:
        """Give the space of deleted rows back to the file system."""
        ...


@dataclass(frozen=True)
class StoredLabel:
    """A person's verdict on one sample for one metric (``ragjury review import``)."""

    metric: str
    sample_id: str
    label: str
    """As the person gave it: true/false, pass/fail or a 1-5 rating, as text."""
    sample: str
    """The sample (JSON) the verdict is on, so it can be judged again."""
    source: str
    labelled_by: str | None = None


class Labels(Protocol):
    """People's verdicts, read back from a review (``calibrate`` and ``--correct-with``)."""

    async def put_labels(self, labels: Sequence[StoredLabel]) -> None:
        """Store (or replace) one label per metric and sample."""
        ...

    async def labels(self, metric: str | None = None) -> list[StoredLabel]:
        """The stored labels (of ``metric``), in import order."""
        ...


class Store(CallLog, Queue, Results, Mailbox, Joins, Workers, Labels, BatchLedger, Protocol):
    """Every role on one database. Open with ``async with``; callers that need one role
    take that role's protocol instead."""

    """The methods every store implements. Open with ``async with``."""

    location: str
    """Where it is, for messages (a path, or a URL with any password redacted)."""

    async def __aenter__(self) -> Store: ...

    async def __aexit__(self, *exc_info: object) -> None: ...
