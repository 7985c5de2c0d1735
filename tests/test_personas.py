"""``--personas``: questions drafted for a persona (in the generator's prompt), judged for it
by the relevance critic, recorded on each pair; a file's bad field named; ``auto:N`` proposed
once, kept with the job, printed and asked again only when the corpus changes. Real CLI, real
HTTP fake, real SQLite."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from ragjury.cli import main

from conftest import CRITIC_AGENTS, read_jsonl, script_happy_path, write_qa_document
from fakeopenai import FakeOpenAI, Reply, chat_json

PERSONAS = [
    {
        "name": "first-time installer",
        "description": "Has never used the tool; wants to get a first example running.",
    },
    {
        "name": "platform engineer",
        "description": "Runs it for a team in production; cares about limits and failures.",
    },
]


def write_docs(folder: Path, documents: int, pairs: int = 3) -> Path:
    """``documents`` pages of ``pairs`` Q:/A: lines each (one chunk per page here)."""
    for d in range(documents):
        write_qa_document(
            folder,
            f"page{d:02d}.md",
            [(f"What is setting {d}-{k}?", f"Value {d}-{k}") for k in range(pairs)],
        )
    return folder


def generate(fake: FakeOpenAI, tmp_path: Path, docs: Path, *extra: str) -> int:
    return main(
        [
            "generate",
            str(docs),
            "--out",
            str(tmp_path / "kept.jsonl"),
            "--summary",
            str(tmp_path / "summary.json"),
            "--db",
            str(tmp_path / "ragjury.db"),
            "--base-url",
            fake.base_url,
            "--api-key",
            "test-key",
            "--model",
            "fake-model",
            "--whole-documents",
            *extra,
        ]
    )


def persona_file(tmp_path: Path, personas: object = PERSONAS, name: str = "personas.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(personas), encoding="utf-8")
    return path


def test_each_chunk_is_drafted_for_a_persona_named_in_its_prompt_and_on_its_pairs(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_happy_path(fake)
    docs = write_docs(tmp_path / "docs", 8, pairs=1)

    assert generate(fake, tmp_path, docs, "--personas", str(persona_file(tmp_path))) == 0

    kept = read_jsonl(tmp_path / "kept.jsonl")
    assert len(kept) == 8
    by_persona = Counter(record["persona"] for record in kept)
    assert set(by_persona) == {p["name"] for p in PERSONAS}
    assert sorted(by_persona.values()) == [4, 4]  # dealt out evenly over the chunks
    described = {p["name"]: p["description"] for p in PERSONAS}
    assert all(r["persona_description"] == described[r["persona"]] for r in kept)
    drafts = fake.requests_for("generator")
    assert len(drafts) == 8
    for record in kept:  # the draft of its chunk was asked for its persona, and only it
        [draft] = [r.text() for r in drafts if record["question"] in r.text()]
        assert described[record["persona"]] in draft
        assert f"as {record['persona']} would ask them" in draft
        others = [p for p in PERSONAS if p["name"] != record["persona"]]
        assert all(p["description"] not in draft for p in others)


def test_the_relevance_critic_judges_each_question_for_its_persona(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_happy_path(fake)
    docs = write_docs(tmp_path / "docs", 6, pairs=1)

    assert generate(fake, tmp_path, docs, "--personas", str(persona_file(tmp_path))) == 0

    kept = read_jsonl(tmp_path / "kept.jsonl")
    relevance = [r.text() for r in fake.requests_for("relevance_critic")]
    assert len(relevance) == len(kept) == 6
    described = {p["name"]: p["description"] for p in PERSONAS}
    for record in kept:
        [asked] = [text for text in relevance if f"Question: {record['question']}" in text]
        assert described[record["persona"]] in asked
        assert "users of these documents" not in asked  # not the general audience
    for agent in ("groundedness_critic", "standalone_critic"):  # their prompts are unchanged
        assert all(
            p["description"] not in r.text() for r in fake.requests_for(agent) for p in PERSONAS
        )


def test_personas_are_part_of_the_job_so_other_personas_draft_again(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_happy_path(fake)
    docs = write_docs(tmp_path / "docs", 3, pairs=1)
    first = persona_file(tmp_path)
    assert generate(fake, tmp_path, docs, "--personas", str(first)) == 0
    calls = len(fake.requests)

    assert generate(fake, tmp_path, docs, "--personas", str(first)) == 0
    assert len(fake.requests) == calls  # the same job, finished: nothing asked again

    other = persona_file(tmp_path, [PERSONAS[0] | {"description": "Only reads the FAQ."}], "b.json")
    assert generate(fake, tmp_path, docs, "--personas", str(other)) == 0
    assert len(fake.requests_for("generator")) == 6  # every chunk drafted again
    with sqlite3.connect(tmp_path / "ragjury.db") as db:
        stored = [json.loads(row[0]) for row in db.execute("SELECT options FROM jobs")]
    assert sorted(len(o["generate"].get("personas", ())) for o in stored) == [1, 2]


@pytest.mark.parametrize(
    ("content", "suffix", "named"),
    [
        ('[{"name": "a"}]', ".json", "persona 1 ('a'): field 'description'"),
        ('[{"name": "a", "description": "x", "age": 3}]', ".json", "field 'age'"),
        ('[{"name": "", "description": "x"}]', ".json", "field 'name'"),
        ('{"people": []}', ".json", "expected a non-empty list of personas"),
        ("[1]", ".json", "persona 1 is int"),
        ("not json", ".json", "is not valid JSON"),
        ('[[personas]]\nname = "a"\n', ".toml", "field 'description'"),
        ('[[personas]]\nname = "a"\ndescription = "x"\n' * 2, ".toml", "'a' is given 2 times"),
    ],
)
def test_a_bad_persona_file_is_refused_naming_the_field_before_any_call(
    fake: FakeOpenAI,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: str,
    suffix: str,
    named: str,
) -> None:
    docs = write_docs(tmp_path / "docs", 1)
    path = tmp_path / f"personas{suffix}"
    path.write_text(content, encoding="utf-8")

    assert generate(fake, tmp_path, docs, "--personas", str(path)) == 2

    error = capsys.readouterr().err
    assert named in error
    assert str(path) in error
    assert fake.requests == []


def test_a_toml_persona_file_is_read(fake: FakeOpenAI, tmp_path: Path) -> None:
    script_happy_path(fake)
    docs = write_docs(tmp_path / "docs", 2, pairs=1)
    path = tmp_path / "personas.toml"
    path.write_text(
        '[[personas]]\nname = "auditor"\ndescription = "Checks what the logs keep."\n',
        encoding="utf-8",
    )

    assert generate(fake, tmp_path, docs, "--personas", str(path)) == 0

    assert {r["persona"] for r in read_jsonl(tmp_path / "kept.jsonl")} == {"auditor"}


def propose(personas: list[dict[str, str]]) -> Reply:
    return chat_json({"personas": personas}, prompt_tokens=400, completion_tokens=90)


def test_auto_personas_are_proposed_once_from_the_corpus_kept_with_the_job_and_printed(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script_happy_path(fake)
    fake.route("persona_proposer", propose(PERSONAS))
    docs = write_docs(tmp_path / "docs", 4, pairs=1)

    assert generate(fake, tmp_path, docs, "--personas", "auto:2") == 0

    [asked] = fake.requests_for("persona_proposer")
    assert "exactly 2 personas" in asked.text()
    assert all(f"What is setting {d}-0?" in asked.text() for d in range(4))  # the excerpts
    printed = capsys.readouterr().err
    for persona in PERSONAS:
        assert f"{persona['name']}: {persona['description']}" in printed
    with sqlite3.connect(tmp_path / "ragjury.db") as db:
        [options] = [json.loads(row[0]) for row in db.execute("SELECT options FROM jobs")]
    assert options["generate"]["personas"] == PERSONAS
    kept = read_jsonl(tmp_path / "kept.jsonl")
    assert {r["persona"] for r in kept} == {p["name"] for p in PERSONAS}
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["by_stage"]["persona_proposer"]["llm_calls"] == 1

    calls = len(fake.requests)
    assert generate(fake, tmp_path, docs, "--personas", "auto:2") == 0
    assert len(fake.requests) == calls  # proposed from the cache: the same job, finished
    assert "first-time installer" in capsys.readouterr().err


def test_an_auto_proposal_with_the_wrong_count_is_asked_again(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_happy_path(fake)
    fake.route("persona_proposer", propose(PERSONAS[:1]), propose(PERSONAS))
    docs = write_docs(tmp_path / "docs", 2, pairs=1)

    assert generate(fake, tmp_path, docs, "--personas", "auto:2") == 0

    _, second = fake.requests_for("persona_proposer")
    assert "expected exactly 2 personas, got 1" in second.text()
    assert {r["persona"] for r in read_jsonl(tmp_path / "kept.jsonl")} == {
        p["name"] for p in PERSONAS
    }


def test_a_proposal_that_never_validates_stops_the_run_before_any_job(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script_happy_path(fake)
    fake.route("persona_proposer", *([propose(PERSONAS[:1])] * 10))  # one persona, not two
    docs = write_docs(tmp_path / "docs", 2, pairs=1)

    assert generate(fake, tmp_path, docs, "--personas", "auto:2") == 1

    error = capsys.readouterr().err
    assert "--personas auto: the model did not propose 2 valid personas" in error
    assert "--personas FILE" in error
    assert fake.requests_for("generator") == []
    with sqlite3.connect(tmp_path / "ragjury.db") as db:
        assert db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0] == 0


@pytest.mark.parametrize("value", ["auto:0", "auto:x", "auto:99"])
def test_a_bad_auto_count_is_refused(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    docs = write_docs(tmp_path / "docs", 1)

    assert generate(fake, tmp_path, docs, "--personas", value) == 2

    assert "auto:N" in capsys.readouterr().err
    assert fake.requests == []


def test_a_run_without_personas_asks_what_it_always_asked(fake: FakeOpenAI, tmp_path: Path) -> None:
    script_happy_path(fake)
    docs = write_docs(tmp_path / "docs", 2, pairs=1)

    assert generate(fake, tmp_path, docs) == 0

    kept = read_jsonl(tmp_path / "kept.jsonl")
    assert all("persona" not in record for record in kept)
    texts = [r.text() for agent in ("generator", *CRITIC_AGENTS) for r in fake.requests_for(agent)]
    assert all("<persona" not in text for text in texts)
    relevance = fake.requests_for("relevance_critic")
    assert all("users of these documents" in r.text() for r in relevance)


@pytest.mark.anyio
async def test_jury_drafts_for_personas_and_writes_references_from_its_settings(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    from test_reference_answers import reference_reply

    from ragjury import Jury, PairJudged, Persona

    from conftest import make_settings

    script_happy_path(fake)
    fake.route("reference_writer", reference_reply)
    docs = write_docs(tmp_path / "docs", 4, pairs=1)
    personas = [Persona(**p) for p in PERSONAS]
    generate = {"personas": personas, "reference_answers": True, "max_pairs": 3}
    judged: list[PairJudged] = []
    async with Jury(make_settings(fake, tmp_path, generate=generate)) as jury:
        await jury.submit_documents([docs])
        async for event in jury.events():
            if isinstance(event, PairJudged):
                judged.append(event)

    assert len(judged) == 3
    assert all(e.outcome == "kept" for e in judged)
    assert {e.pair.persona for e in judged} == set(personas)
    assert all(e.reference_answer and e.pair.answer in e.reference_answer for e in judged)


def test_the_readme_persona_record_is_what_the_example_corpus_plans_and_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import re

    from ragjury.agents.balance import Candidate, drafted_chunks
    from ragjury.agents.question_plan import chunks_of, drawn_type
    from ragjury.config import GenerationOptions
    from ragjury.ingest import DocumentReader
    from ragjury.output import pair_record
    from ragjury.personas import load_personas
    from ragjury.schemas import CritiqueResult, PairJudged, QAPair

    root = Path(__file__).resolve().parent.parent
    monkeypatch.chdir(root)  # the command runs from the repository, as the README says
    section = (
        (root / "README.md")
        .read_text(encoding="utf-8")
        .split("### Personas, reference answers and balance", 1)[1]
    )
    record = json.loads(re.search(r"```json\n(\{.*?\})\n```", section, re.DOTALL).group(1))  # type: ignore[union-attr]  # the section has one
    personas = load_personas(root / "examples" / "personas.toml")
    options = GenerationOptions(personas=personas, max_pairs=10, reference_answers=True)
    documents = DocumentReader(["examples/fastapi-docs"])()
    chunks = {c.id: c for d in documents for c in chunks_of(d, options)}
    candidates = [Candidate(c.id, c.document_id, drawn_type(c, options)) for c in chunks.values()]
    chosen = drafted_chunks(candidates, options)
    chunk_id = record["chunk_id"]

    assert chunk_id in chosen  # one of the ten chunks --max-pairs 10 drafts
    persona = personas[chosen[chunk_id] or 0]
    assert (persona.name, persona.description) == (
        record["persona"],
        record["persona_description"],
    )
    chunk = chunks[chunk_id]
    pair = QAPair(
        id=record["id"],
        question=record["question"],
        answer=record["answer"],
        context=chunk.text,
        source=chunk.source,
        chunk_id=chunk.id,
        persona=persona,
    )
    critiques = {c: CritiqueResult(rating=5, rationale="r") for c in record["critiques"]}
    written = pair_record(
        PairJudged(
            pair=pair,
            outcome="kept",
            critiques=critiques,
            reference_answer=record["reference_answer"],
        )
    )
    assert list(record) == list(written)
