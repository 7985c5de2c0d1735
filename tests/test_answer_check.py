"""The answerability check: a fourth critic that answers each drafted question from its
context(s) alone, never shown the drafted answer, then rates how well its answer and the
drafted one agree; multi-hop questions are also tried from each chunk alone. Real CLI, real
HTTP fake, real SQLite (and a database made by the version before the check)."""

from __future__ import annotations

import json
import re
import shutil
import signal
import sqlite3
from pathlib import Path

import pandas as pd
from fakebatches import FakeBatches, batched
from test_daemon import Daemon, daemons, serve, states, until

from ragjury._json import json_object
from ragjury.cli import main
from ragjury.config import GenerationOptions
from ragjury.job_spec import GenerationSpec

from conftest import (
    ANSWER_AGENTS,
    CHECK_CALLS,
    CRITIC_AGENTS,
    agreement_reply,
    critic_reply,
    generator_reply,
    own_answer_reply,
    question_of,
    read_jsonl,
    read_summary,
    script_happy_path,
    write_qa_document,
)
from fakeopenai import FakeOpenAI, RecordedRequest, Reply, chat_json
from typed_corpus import typed_answer_reply, typed_generator_reply, write_topics

__all__ = ["daemons"]  # the fixture, shared with test_daemon

FACTS = {
    "ports.md": [("What port does uvicorn serve on by default?", "8000")],
    "cli.md": [("Which command starts the FastAPI development server?", "fastapi dev")],
    "docs.md": [("At which path are the interactive API docs served?", "/docs")],
}
PREVIOUS_DB = Path(__file__).parent / "data" / "previous" / "pairs_in_flight.db"


def corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    for name, pairs in FACTS.items():
        write_qa_document(folder, name, pairs)
    return folder


def run(fake: FakeOpenAI, tmp_path: Path, docs: Path, *extra: str, db: str = "r.db") -> int:
    return main(
        [
            *("generate", str(docs), "--whole-documents", "--db", str(tmp_path / db)),
            *("--out", str(tmp_path / "kept.jsonl"), "--rejected", str(tmp_path / "rej.jsonl")),
            *("--summary", str(tmp_path / "summary.json")),
            *("--base-url", fake.base_url, "--api-key", "k", "--model", "fake-model"),
            *extra,
        ]
    )


def script_typed(fake: FakeOpenAI, alone: frozenset[str] = frozenset()) -> None:
    fake.route("generator", typed_generator_reply)
    for agent in CRITIC_AGENTS:
        fake.route(agent, critic_reply())
    fake.route("answerability_critic", lambda r: typed_answer_reply(r, alone=alone))
    fake.route("answer_agreement", agreement_reply)


def test_the_critic_answers_from_the_question_and_contexts_without_the_drafted_answer(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_happy_path(fake)

    def drafted_in_words(request: RecordedRequest) -> Reply:
        """Answers the text does not hold word for word, so a leak would show."""
        pairs = json.loads(generator_reply(request).body["choices"][0]["message"]["content"])  # type: ignore[index]  # a JSON reply
        for pair in pairs["pairs"]:
            pair["answer"] = f"It is {pair['answer']}, as drafted."
        return chat_json(pairs)

    def agrees_when_contained(request: RecordedRequest) -> Reply:
        text = request.messages[-1]["content"]
        key, own = re.findall(r"answer:\n(.*)", text)
        return chat_json({"rationale": "same value", "rating": 5 if own in key else 1})

    fake.route("generator", drafted_in_words)
    fake.route("answer_agreement", agrees_when_contained)

    assert run(fake, tmp_path, corpus(tmp_path)) == 0

    kept = {r["question"]: r for r in read_jsonl(tmp_path / "kept.jsonl")}
    assert len(kept) == 3
    answering = fake.requests_for("answerability_critic")
    assert len(answering) == 3
    for request in answering:
        record = kept[question_of(request)]
        body = json.dumps(request.body)  # everything the server received, schema included
        assert json.dumps(record["question"])[1:-1] in body
        assert json.dumps(record["context"])[1:-1] in body  # the context, whole
        assert "as drafted" not in body  # never the drafted answer
        assert json.dumps(record["answer"])[1:-1] not in body
    # the comparison is given both answers; the critic's own is kept on the record
    for request in fake.requests_for("answer_agreement"):
        record = kept[question_of(request)]
        assert record["answer"] in request.text()
        assert record["answer_check"]["answer"] in request.text()
        assert record["answer_check"]["answer"] in record["answer"]


def test_a_pair_whose_answer_the_critic_cannot_reproduce_is_rejected_with_its_answer_kept(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_happy_path(fake)
    port, path = FACTS["ports.md"][0][0], FACTS["docs.md"][0][0]

    def reader(request: RecordedRequest) -> Reply:
        if question_of(request) == port:  # the text read another way: another value
            return chat_json({"answer": "9000", "answerable": True})
        if question_of(request) == path:  # the text read as not holding the answer
            return chat_json({"answer": "No path is given.", "answerable": False})
        return own_answer_reply(request)

    fake.route("answerability_critic", reader)
    rejected = tmp_path / "rejected.parquet"

    assert run(fake, tmp_path, corpus(tmp_path), "--rejected", str(rejected)) == 0

    assert [r["question"] for r in read_jsonl(tmp_path / "kept.jsonl")] == [FACTS["cli.md"][0][0]]
    frame = pd.read_parquet(rejected).set_index("question")
    assert set(frame.index) == {port, path}
    assert set(frame["outcome"]) == {"rejected"}
    assert frame.loc[port, "answerability_rating"] == 1
    assert frame.loc[port, "answerability_rationale"] == "the answers differ"
    assert frame.loc[port, "check_answer"] == "9000"
    assert bool(frame.loc[port, "check_answerable"]) is True
    assert frame.loc[path, "answerability_rating"] == 1
    assert frame.loc[path, "answerability_rationale"].endswith("No path is given.")
    assert bool(frame.loc[path, "check_answerable"]) is False
    # the other critics were content: the check alone rejected them
    assert set(frame["groundedness_rating"]) == set(frame["relevance_rating"]) == {5}
    # a question the contexts do not answer needs no comparison
    compared = {question_of(r) for r in fake.requests_for("answer_agreement")}
    assert compared == {port, FACTS["cli.md"][0][0]}
    assert read_summary(tmp_path)["by_stage"]["answer_agreement"]["llm_calls"] == 2


def test_a_comparison_that_never_validates_fails_the_pair_with_the_reason(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_happy_path(fake)
    victim = FACTS["cli.md"][0][0]

    def agreement(request: RecordedRequest) -> Reply:
        if question_of(request) == victim:  # a rating off the scale, every time
            return chat_json({"rationale": "They agree.", "rating": 9})
        return agreement_reply(request)

    fake.route("answer_agreement", agreement)

    assert run(fake, tmp_path, corpus(tmp_path), "--max-retries", "1") == 0

    [failed] = read_jsonl(tmp_path / "rej.jsonl")
    assert (failed["question"], failed["outcome"]) == (victim, "failed")
    assert failed["error"]["stage"] == "answerability_critic"
    assert failed["error"]["attempts"] == 2  # asked, then re-asked once
    assert "answer_agreement" in failed["error"]["message"]
    assert '"rating": 9' in failed["error"]["last_raw_output"]
    assert set(failed["critiques"]) == {"groundedness", "relevance", "standalone"}
    assert read_summary(tmp_path)["failed"] == 1


def test_a_multi_hop_question_one_chunk_answers_alone_is_retyped_to_that_chunk(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_typed(fake, alone=frozenset({"aa-b"}))  # topic aa's page b answers by itself
    docs = write_topics(tmp_path / "docs", 3)  # three topics: each page related to its twin

    assert run(fake, tmp_path, docs, "--question-types", "multi_hop=1") == 0

    kept = {r["question"]: r for r in read_jsonl(tmp_path / "kept.jsonl")}
    assert len(kept) == 6
    assert read_jsonl(tmp_path / "rej.jsonl") == []
    # drafted from aa-a with aa-b; aa-b answers it alone, so it is a factoid of aa-b
    moved = kept["Which moraa records join velaa and danaa when stored?"]
    assert moved["question_type"] == "factoid"
    assert [Path(c).name for c in moved["chunk_ids"]] == ["aa-b.md::0"]
    assert moved["context"] == (docs / "aa-b.md").read_text().strip()
    assert Path(moved["source"]).name == "aa-b.md"
    assert "shared_terms" not in moved
    check = moved["answer_check"]
    assert check["retyped_from"] == "multi_hop"
    assert [Path(c).name for c in check["chunk_ids"]] == ["aa-a.md::0", "aa-b.md::0"]
    assert Path(check["answered_alone_by"]).name == "aa-b.md::0"
    assert [(Path(a["chunk_id"]).name, a["answerable"]) for a in check["alone"]] == [
        ("aa-a.md::0", False),
        ("aa-b.md::0", True),
    ]
    assert "retyped to factoid" in check["note"]
    # drafted from aa-b with aa-a: a factoid of its own first chunk
    kept_b = kept["Which moraa records join velaa and danaa once read back?"]
    assert kept_b["question_type"] == "factoid"
    assert [Path(c).name for c in kept_b["chunk_ids"]] == ["aa-b.md::0"]
    # topics ab and ac need both pages: still multi-hop, each page tried alone, found short
    for record in (r for r in kept.values() if "velaa" not in r["question"]):
        assert record["question_type"] == "multi_hop"
        assert len(record["chunk_ids"]) == 2
        assert [a["answerable"] for a in record["answer_check"]["alone"]] == [False, False]
        assert record["answer_check"]["retyped_from"] is None


def test_multi_hop_strict_rejects_a_multi_hop_question_one_chunk_answers_alone(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_typed(fake, alone=frozenset({"aa-a", "aa-b"}))
    docs = write_topics(tmp_path / "docs", 3)  # three topics: each page related to its twin
    rejected = tmp_path / "rejected.csv"

    code = run(
        fake, tmp_path, docs, "--question-types", "multi_hop=1", "--multi-hop-strict",
        "--rejected", str(rejected),
    )  # fmt: skip

    assert code == 0
    kept = read_jsonl(tmp_path / "kept.jsonl")
    assert {Path(r["chunk_id"]).name[:2] for r in kept} == {"ab", "ac"}
    assert {r["question_type"] for r in kept} == {"multi_hop"}
    frame = pd.read_csv(rejected)
    assert sorted(Path(c).name for c in frame["chunk_id"]) == ["aa-a.md::0", "aa-b.md::0"]
    assert set(frame["question_type"]) == {"multi_hop"}  # rejected as drafted
    assert set(frame["answerability_rating"]) == {5}  # its answer was right ...
    assert all(n.endswith("rejected (--multi-hop-strict)") for n in frame["check_note"])
    assert list(frame["answered_alone_by"]) == list(frame["chunk_id"])  # ... from one chunk
    alone = [json.loads(text) for text in frame["check_alone"]]
    assert all(attempt[0]["answerable"] for attempt in alone)


def test_dry_run_counts_the_calls_of_the_check_as_a_run_makes_them(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_happy_path(fake)
    docs = corpus(tmp_path)

    assert run(fake, tmp_path, docs, "--dry-run") == 0
    estimate = read_summary(tmp_path)
    assert fake.requests == []
    assert run(fake, tmp_path, docs) == 0
    ran = read_summary(tmp_path)
    assert run(fake, tmp_path, docs, "--dry-run", "--no-answer-check") == 0
    unchecked = read_summary(tmp_path)

    assert estimate["llm_calls"] == ran["llm_calls"] == 3 * (1 + 3 + CHECK_CALLS)
    for stage in ANSWER_AGENTS:
        assert estimate["by_stage"][stage]["llm_calls"] == ran["by_stage"][stage]["llm_calls"] == 3
    assert unchecked["llm_calls"] == 3 * 4
    assert not set(ANSWER_AGENTS) & set(unchecked["by_stage"])
    assert any("answerability critic" in line for line in estimate["assumptions"])


def test_the_check_is_cached_and_its_prompt_and_options_make_a_new_step(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_happy_path(fake)
    docs = corpus(tmp_path)
    assert run(fake, tmp_path, docs) == 0

    assert run(fake, tmp_path, docs) == 0  # the same command: every step from the store
    assert read_summary(tmp_path)["llm_calls"] == 0

    answering = tmp_path / "answering.j2"
    answering.write_text(
        "Answer from the text only.\n--- user ---\n<text>\n{{ context }}\n</text>\n\n"
        "Question: {{ question }}\n",
        encoding="utf-8",
    )
    assert run(fake, tmp_path, docs, "--prompt", f"answerability={answering}") == 0
    again = read_summary(tmp_path)
    assert set(again["by_stage"]) == set(ANSWER_AGENTS)  # only the check is asked again
    assert again["llm_calls"] == 3 * CHECK_CALLS

    fake.requests.clear()
    assert run(fake, tmp_path, docs, "--no-answer-check") == 0  # a new job: drafts and
    assert fake.requests == []  # critiques come from the cache, and no check is made
    assert all("answer_check" not in r for r in read_jsonl(tmp_path / "kept.jsonl"))


def test_in_batch_mode_the_check_asks_its_calls_in_turn_and_gives_a_direct_runs_records(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_happy_path(fake)
    docs = corpus(tmp_path)
    assert run(fake, tmp_path, docs, db="direct.db") == 0
    direct = read_jsonl(tmp_path / "kept.jsonl")
    fake.reset()
    script_happy_path(fake)
    batches = FakeBatches(fake)

    fast = ("--batch", "--batch-wait", "0", "--batch-poll", "0.05")
    assert run(fake, tmp_path, docs, *fast, db="batch.db") == 0

    assert read_jsonl(tmp_path / "kept.jsonl") == direct  # answers and checks alike
    chats = [r for r in fake.requests if r.path.endswith("/chat/completions")]
    assert len(chats) == 3 * (4 + CHECK_CALLS)
    assert all(batched(r) for r in chats)
    assert batches.created


def test_a_stored_spec_without_answer_check_predates_it_and_runs_without() -> None:
    assert GenerationSpec.model_validate({}).generate.answer_check is False  # ragjury 0.1's
    old = GenerationSpec.model_validate({"generate": {"chunk_size": 500}, "prompts": {}})
    assert old.generate.answer_check is False
    assert json_object(old.stored()["generate"])["answer_check"] is False  # and stays so once read

    new = GenerationSpec(generate=GenerationOptions()).stored()
    assert json_object(new["generate"])["answer_check"] is True
    assert GenerationSpec.model_validate(new).generate.answer_check is True
    assert "multi_hop_strict" not in json_object(new["generate"])  # stored only when set
    strict = GenerationSpec(generate=GenerationOptions(multi_hop_strict=True)).stored()
    assert GenerationSpec.model_validate(strict).generate.multi_hop_strict is True


def test_a_job_stored_before_the_check_resumes_its_pairs_in_flight_without_it(
    fake: FakeOpenAI, tmp_path: Path, daemons: list[Daemon]
) -> None:
    """``pairs_in_flight.db`` is the version before the check, killed while its two pairs
    waited for two of their critics (tests/data/previous/make_pairs_in_flight.py). Their
    drafts were never sent to an answerability critic: the job must finish without one, and
    a job submitted now to the same database gets it."""
    db = tmp_path / "old.db"
    shutil.copyfile(PREVIOUS_DB, db)
    script_happy_path(fake)
    new_docs = tmp_path / "new"
    write_qa_document(new_docs, "new.md", [("Which header carries the API key?", "X-API-Key")])
    assert main(["submit", str(new_docs), "--db", str(db), "--whole-documents"]) == 0

    daemon = serve(daemons, fake, db, "resumer")
    until(lambda: states(db)["done"] == 3, "the old job's documents and the new one done")
    daemon.signal(signal.SIGTERM)
    assert daemon.wait() == 0

    out = tmp_path / "all.jsonl"
    assert main(["export", "--db", str(db), "--out", str(out)]) == 0
    kept = {r["question"]: r for r in read_jsonl(out)}
    assert len(kept) == 3
    old = [r for q, r in kept.items() if q != "Which header carries the API key?"]
    for record in old:
        assert set(record["critiques"]) == {"groundedness", "relevance", "standalone"}
        assert "answer_check" not in record
    new = kept["Which header carries the API key?"]
    assert new["answer_check"]["answer"] == "X-API-Key"
    # the old pairs' two waiting critics were asked; the check only of the new pair
    assert len(fake.requests_for("relevance_critic")) == 3
    assert len(fake.requests_for("groundedness_critic")) == 1
    assert [question_of(r) for r in fake.requests_for("answerability_critic")] == [
        "Which header carries the API key?"
    ]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM messages").fetchone() == (0,)
