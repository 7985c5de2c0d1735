"""Real `evaluate` and `generate` runs against the scripted server, for the report tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import script_happy_path, write_qa_document
from evalfakes import correctness_reply, script_judges
from fakeopenai import FakeOpenAI, RecordedRequest, Reply, chat, chat_json

ROOT = Path(__file__).resolve().parents[1]

# Its answer and context try every way of getting markup to run; all must show as text.
HOSTILE: dict[str, Any] = {
    "id": "hostile",
    "question": "What does the <b>bold</b> tag do?",
    "answer": '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2"> '
    "It makes text bold.",
    "contexts": [
        "The b tag makes text bold. It makes text bold. </script><script>window.__pwned = 3"
        "</script><!-- <img src=y onerror=alert(1)>"
    ],
    "reference": "It makes text bold",
}
SAMPLES: list[dict[str, Any]] = [
    {
        "id": "eiffel",
        "question": "Where is the Eiffel Tower and what is it made of?",
        "answer": "The Eiffel Tower is in Paris. The Eiffel Tower is made of cheese.",
        "contexts": ["The Eiffel Tower is in Paris. The tower is made of wrought iron."],
        "reference": "Paris",
    },
    {
        "id": "tokyo",
        "question": "What is the capital of Japan?",
        "answer": "Tokyo is the capital of Japan.",
        "contexts": ["Tokyo is the capital of Japan."],
        "reference": "Tokyo",
    },
    {
        "id": "refusal",
        "question": "Who wrote Hamlet?",
        "answer": "I don't know.",
        "contexts": ["Hamlet is a play by William Shakespeare."],
        "reference": "William Shakespeare",
    },
    {
        "id": "seine",
        "question": "Which river flows through Paris?",
        "answer": "The Seine flows through Paris. The Seine is 777 km long.",
        "contexts": ["The Seine flows through Paris.", "The Seine is 777 km long."],
        "reference": "The Seine",
    },
    HOSTILE,
]


def cli(args: list[str], cwd: Path) -> int:
    """``python main.py ARGS`` in ``cwd`` as a user runs it, in a process of its own (the
    browser tests' Playwright keeps an event loop running in the test's thread)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "main.py"), *args],
        cwd=cwd,
        env={"PATH": "/usr/bin:/bin", "HOME": str(cwd)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode:
        print(done.stderr)
    return done.returncode


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def evaluation_run(fake: FakeOpenAI, folder: Path, *extra: str) -> Path:
    """Judge :data:`SAMPLES` (faithfulness, correctness); the correctness judge fails on the
    Seine sample, so the report has a failure with its raw output. Returns the folder with
    samples.jsonl, results.jsonl, summary.json and ragjury.db."""
    folder.mkdir(parents=True, exist_ok=True)
    script_judges(fake)

    def correctness(request: RecordedRequest) -> Reply:
        if "Seine" in request.text():
            return chat('{"reasoning": "<i>unfinished')
        return correctness_reply(request)

    fake.route("correctness_judge", correctness)
    samples = write_jsonl(folder / "samples.jsonl", SAMPLES)
    code = cli(
        [
            "evaluate",
            samples.name,
            "--out",
            "results.jsonl",
            "--summary",
            "summary.json",
            "--db",
            "ragjury.db",
            "--base-url",
            fake.base_url,
            "--api-key",
            "test-key",
            "--model",
            "fake-model",
            "--max-retries",
            "0",
            "--metrics",
            "faithfulness,correctness",
            *extra,
        ],
        folder,
    )
    assert code == 0, code
    return folder


def dataset_run(fake: FakeOpenAI, folder: Path) -> Path:
    """Generate from three documents; the relevance critic rates one question 2, so one pair
    is rejected. Returns the folder with kept.jsonl, rejected.jsonl, summary.json."""
    docs = folder / "docs"
    write_qa_document(docs, "ports.md", [("What port does uvicorn use by default?", "8000")])
    write_qa_document(docs, "cli.md", [("Which command starts the dev server?", "fastapi dev")])
    write_qa_document(docs, "docs.md", [("Where are the <b>docs</b> served?", "/docs")])
    script_happy_path(fake, {"relevance_critic": {"Which command starts the dev server?": 2}})
    code = cli(
        [
            "generate",
            "docs",
            "--out",
            "kept.jsonl",
            "--rejected",
            "rejected.jsonl",
            "--summary",
            "summary.json",
            "--db",
            "ragjury.db",
            "--base-url",
            fake.base_url,
            "--api-key",
            "test-key",
            "--model",
            "fake-model",
            "--whole-documents",
        ],
        folder,
    )
    assert code == 0, code
    return folder


POLITENESS = '''
name = "politeness"
description = "Is the answer polite?"
inputs = ["question", "answer"]
scale = [1, 5]
pass_at = 4
prompt = """
Rate how polite the answer is.
Question: {{ question }}
Answer: {{ answer }}
"""
'''
WIDE_METRICS = (
    "faithfulness,correctness,rubric,retrieval,context_relevance,context_precision,"
    "context_recall,answer_relevance,politeness"
)


def wide_run(fake: FakeOpenAI, folder: Path) -> Path:
    """Judge :data:`SAMPLES`, each with its reference context and a distractor retrieved
    first for Tokyo, on nine metrics: the built-in judges, retrieval, the context judges, a
    judge file (politeness.toml) and a custom verdict prompt (verdict.j2). The correctness
    judge fails on the Seine sample as in :func:`evaluation_run`."""
    folder.mkdir(parents=True, exist_ok=True)
    script_judges(fake)

    def correctness(request: RecordedRequest) -> Reply:
        if "Seine" in request.text():
            return chat('{"reasoning": "<i>unfinished')
        return correctness_reply(request)

    fake.route("correctness_judge", correctness)
    fake.route("custom_judge:politeness", lambda r: chat_json({"reasoning": "kind", "score": 4}))
    samples = [dict(s, reference_contexts=[s["contexts"][0]]) for s in SAMPLES]
    samples[1]["contexts"] = ["Mount Fuji is a volcano.", *SAMPLES[1]["contexts"]]
    write_jsonl(folder / "samples.jsonl", samples)
    (folder / "politeness.toml").write_text(POLITENESS, encoding="utf-8")
    verdict = (ROOT / "ragjury" / "prompts" / "templates" / "verdict.j2").read_text("utf-8")
    (folder / "verdict.j2").write_text(verdict + "\n(A custom copy.)\n", encoding="utf-8")
    code = cli(
        [
            "evaluate",
            "samples.jsonl",
            "--out",
            "results.jsonl",
            "--summary",
            "summary.json",
            "--db",
            "ragjury.db",
            "--base-url",
            fake.base_url,
            "--api-key",
            "test-key",
            "--model",
            "fake-model",
            "--max-retries",
            "0",
            "--judge",
            "politeness.toml",
            "--prompt",
            "verdict=verdict.j2",
            "--metrics",
            WIDE_METRICS,
        ],
        folder,
    )
    assert code == 0, code
    return folder
