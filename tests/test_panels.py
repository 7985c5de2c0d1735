"""Judge panels and repeats end to end: three scripted judges, each on an endpoint of its own
(a FakeOpenAI apiece), judged through the real CLI; the figures are checked by hand."""

from __future__ import annotations

import json
import socket
import threading
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest
from test_report import page_data

from ragjury.cli import main
from ragjury.job_spec import EvaluationSpec, spec_of
from ragjury.store import open_store
from ragjury.store.base import Job

from evalcli import EIFFEL, evaluate, results, write_jsonl
from evalfakes import splitter_reply, user_message, verdict_reply
from fakeopenai import FakeOpenAI, RecordedRequest, Reply, chat_json, error

QUESTIONS = {f"s{i}": f"What is fact number {i}?" for i in range(1, 5)}
# each judge's correctness score (1-5, passing at 4) per sample
SCORES = {
    "a": {"s1": 5, "s2": 5, "s3": 2, "s4": 4},
    "b": {"s1": 5, "s2": 2, "s3": 2, "s4": 5},
    "c": {"s1": 4, "s2": 2, "s3": 5, "s4": 1},
}
# by hand: s1 all pass; s2 a passes alone; s3 c passes alone; s4 c fails alone
MAJORITY = {"s1": True, "s2": False, "s3": False, "s4": True}
DISSENT = {"s1": [], "s2": ["a"], "s3": ["c"], "s4": ["c"]}


def _sample_of(request: RecordedRequest) -> str:
    text = user_message(request)
    return next(sid for sid, question in QUESTIONS.items() if question in text)


def scripted(scores: Mapping[str, int]) -> Any:
    def respond(request: RecordedRequest) -> Reply:
        score = scores[_sample_of(request)]
        return chat_json({"reasoning": f"scripted {score}", "score": score})

    return respond


def samples(tmp_path: Path) -> Path:
    records = [
        {"id": sid, "question": q, "answer": f"Fact {sid}.", "reference": f"Fact {sid}."}
        for sid, q in QUESTIONS.items()
    ]
    return write_jsonl(tmp_path / "samples.jsonl", records)


@pytest.fixture
def endpoints() -> Iterator[dict[str, FakeOpenAI]]:
    fakes = {name: FakeOpenAI() for name in SCORES}
    for fake in fakes.values():
        fake.start()
    try:
        for name, fake in fakes.items():
            fake.route(f"correctness_judge@{name}", scripted(SCORES[name]))
        yield fakes
    finally:
        for fake in fakes.values():
            fake.stop()


def judges_flag(fakes: Mapping[str, FakeOpenAI]) -> str:
    return ",".join(f"{name}=model-{name}@{fake.base_url}" for name, fake in fakes.items())


def summary(tmp_path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((tmp_path / "summary.json").read_text())
    return loaded


def run_panel(
    fakes: Mapping[str, FakeOpenAI], tmp_path: Path, *extra: str
) -> tuple[int, dict[str, Any]]:
    code = evaluate(
        fakes["a"],  # the run's own endpoint (unused: every LLM metric goes to the panel)
        tmp_path,
        samples(tmp_path),
        "--metrics",
        "correctness",
        "--judges",
        judges_flag(fakes),
        "--max-transport-retries",
        "0",
        *extra,
    )
    return code, summary(tmp_path)


def test_majority_of_three_judges_with_spread_dissent_and_agreement_by_hand(
    endpoints: dict[str, FakeOpenAI], tmp_path: Path
) -> None:
    code, figures = run_panel(endpoints, tmp_path)
    assert code == 0
    judged = results(tmp_path)
    for sid, passing in MAJORITY.items():
        entry = judged[sid]["metrics"]["correctness"]
        scores = [SCORES[j][sid] for j in SCORES]
        assert entry["passing"] is passing
        assert entry["score"] == pytest.approx(sum(scores) / 3)  # majority: the mean score
        assert entry["panel"]["spread"] == max(scores) - min(scores)
        assert entry["panel"]["dissenters"] == DISSENT[sid]
        assert entry["panel"]["answered"] == 3
        assert entry["panel"]["failed"] == []
    correctness = figures["metrics"]["correctness"]
    assert correctness["pass_rate"] == 0.5
    assert correctness["mean"] == pytest.approx((14 / 3 + 3 + 3 + 10 / 3) / 4, abs=1e-4)
    panel = figures["panel"]["metrics"]["correctness"]
    # Fleiss: passes per sample 3,1,1,2 of 3; agreement per sample 1, 1/3, 1/3, 1/3 -> 0.5;
    # pass share 7/12, chance (7/12)^2 + (5/12)^2 = 74/144
    chance = 74 / 144
    assert panel["fleiss_kappa"] == pytest.approx((0.5 - chance) / (1 - chance), abs=1e-4)
    # Krippendorff (interval): observed 64/12 (within-sample squared differences), expected
    # 648/132 (over all 12 scores: 2*12*174 - 2*42^2 = 648)
    assert panel["krippendorff_alpha"] == pytest.approx(1 - (64 / 12) / (648 / 132), abs=1e-4)
    assert panel["disagreements"] == 3
    assert set(panel["disagreeing_samples"]) == {"s2", "s3", "s4"}
    costs = figures["panel"]["cost_by_judge"]
    assert {j: c["llm_calls"] for j, c in costs.items()} == {"a": 4, "b": 4, "c": 4}
    for name, fake in endpoints.items():
        assert len(fake.requests_for(f"correctness_judge@{name}")) == 4
        assert {r.body["model"] for r in fake.requests_for(f"correctness_judge@{name}")} == {
            f"model-{name}"
        }


def test_mean_combination_compares_the_mean_score_with_the_pass_mark(
    endpoints: dict[str, FakeOpenAI], tmp_path: Path
) -> None:
    code, figures = run_panel(endpoints, tmp_path, "--combine", "mean")
    judged = results(tmp_path)
    # means 4.67, 3, 3, 3.33 against 4: only s1 passes
    assert [judged[s]["metrics"]["correctness"]["passing"] for s in QUESTIONS] == [
        True,
        False,
        False,
        False,
    ]
    assert figures["metrics"]["correctness"]["pass_rate"] == 0.25
    assert code == 0


def test_a_failing_endpoint_is_named_and_the_others_still_vote(
    endpoints: dict[str, FakeOpenAI], tmp_path: Path
) -> None:
    endpoints["c"].route("correctness_judge@c", error(500, "judge c is down"))
    code, figures = run_panel(endpoints, tmp_path)
    judged = results(tmp_path)
    for sid in QUESTIONS:
        entry = judged[sid]["metrics"]["correctness"]
        assert entry["outcome"] == "scored"
        assert entry["panel"]["failed"] == ["c"]
        assert entry["panel"]["answered"] == 2
        assert entry["panel"]["of"] == 3
        assert "2 of 3 judges" in entry["reason"]
        assert "c (" in entry["reason"]
        assert entry["panel"]["judges"]["c"]["outcome"] == "failed"
    # s2: a passes, b fails: a tie of two is not a pass
    assert judged["s2"]["metrics"]["correctness"]["passing"] is False
    assert judged["s1"]["metrics"]["correctness"]["passing"] is True
    assert figures["panel"]["metrics"]["correctness"]["judges"]["c"]["failed"] == 4
    assert figures["panel"]["metrics"]["correctness"]["judges"]["a"]["scored"] == 4
    assert code == 0


def flipping() -> Any:
    """A judge whose verdict on a sample flips on each call: 5, 2, 5, 2, ..."""
    calls: Counter[str] = Counter()
    lock = threading.Lock()

    def respond(request: RecordedRequest) -> Reply:
        sid = _sample_of(request)
        with lock:
            calls[sid] += 1
            n = calls[sid]
        score = 5 if n % 2 else 2
        return chat_json({"reasoning": f"call {n}", "score": score})

    return respond


def _repeats(fake: FakeOpenAI, tmp_path: Path, responder: Any) -> dict[str, Any]:
    fake.route("correctness_judge@judge", responder)
    tmp_path.mkdir()
    code = evaluate(fake, tmp_path, samples(tmp_path), "--metrics", "correctness", "--repeats", "4")
    assert code in (0, 5)
    return summary(tmp_path)


def test_a_judge_that_flips_is_flaky_and_widens_the_interval(tmp_path: Path) -> None:
    with FakeOpenAI() as steady_fake, FakeOpenAI() as flaky_fake:
        steady = _repeats(steady_fake, tmp_path / "steady", scripted(SCORES["a"] | {"s3": 5}))
        flaky = _repeats(flaky_fake, tmp_path / "flaky", flipping())
        # every repeat is asked: none is served from the cache of another
        assert len(flaky_fake.requests_for("correctness_judge@judge")) == 16
        temperatures = {r.body["temperature"] for r in flaky_fake.requests}
        assert temperatures == {0.7}
    assert steady["panel"]["metrics"]["correctness"]["flaky_samples"] == 0
    figures = flaky["panel"]["metrics"]["correctness"]
    assert figures["flaky_samples"] == 4
    assert figures["flaky_share"] == 1.0
    low, high = flaky["metrics"]["correctness"]["pass_rate_interval"]
    steady_low, steady_high = steady["metrics"]["correctness"]["pass_rate_interval"]
    assert steady_high - steady_low == 0  # four sure passes
    # each sample's verdict is a tie (2 of 4 repeats pass), so it fails: 0 passes of 4, a
    # spread of 0 between samples; the spread within them is what widens the interval
    assert flaky["metrics"]["correctness"]["pass_rate"] == 0
    assert high - low > 0.2
    mean_low, mean_high = flaky["metrics"]["correctness"]["mean_interval"]
    assert mean_low < 3.5 - 0.5
    assert mean_high > 3.5 + 0.5
    assert flaky["metrics"]["correctness"]["pass_rate_stderr"] > 0


def test_a_rerun_asks_no_judge_again(endpoints: dict[str, FakeOpenAI], tmp_path: Path) -> None:
    run_panel(endpoints, tmp_path)
    before = sum(len(f.requests) for f in endpoints.values())
    code, figures = run_panel(endpoints, tmp_path)
    assert code == 0
    assert sum(len(f.requests) for f in endpoints.values()) == before
    assert figures["panel"]["metrics"]["correctness"]["disagreements"] == 3


def test_the_panel_is_stored_with_the_job(endpoints: dict[str, FakeOpenAI], tmp_path: Path) -> None:
    run_panel(endpoints, tmp_path, "--combine", "median")

    async def stored() -> list[Job]:
        async with open_store(str(tmp_path / "ragjury.db")) as store:
            return await store.jobs(limit=5)

    (job,) = anyio.run(stored)
    spec = spec_of(job)  # the stored options, read back as the job's spec
    assert isinstance(spec, EvaluationSpec)
    assert spec.panel is not None
    assert [j.name for j in spec.panel.judges] == ["a", "b", "c"]
    assert spec.panel.combine == "median"
    assert spec.panel.repeats == 1


def test_a_two_step_metric_and_a_keyword_test_beside_a_panel(tmp_path: Path) -> None:
    """faithfulness (split, then verdicts: two agents per judge) goes to each judge on its own
    endpoint; the keyword test, which no LLM judges, runs once on the sample itself."""
    with FakeOpenAI() as one, FakeOpenAI() as two:
        for name, fake in (("one", one), ("two", two)):
            fake.route(f"statement_splitter@{name}", splitter_reply)
            fake.route(f"verdict_judge@{name}", verdict_reply)
        path = write_jsonl(tmp_path / "samples.jsonl", [EIFFEL])
        code = evaluate(
            one,
            tmp_path,
            path,
            "--metrics",
            "faithfulness,keywords",
            "--judges",
            f"one=m1@{one.base_url},two=m2@{two.base_url}",
        )
        assert len(two.requests_for("verdict_judge@two")) == 1
        assert len(one.requests_for("verdict_judge@one")) == 1
    assert code == 5 or code == 0
    entry = results(tmp_path)["eiffel"]["metrics"]
    # one of two statements is supported, for both judges
    assert entry["faithfulness"]["score"] == 0.5
    assert entry["faithfulness"]["panel"]["answered"] == 2
    assert len(entry["faithfulness"]["statements"]) == 2  # the details of a judge are kept
    assert entry["keywords"]["outcome"] == "scored"
    assert "panel" not in entry["keywords"]


def test_the_report_shows_the_samples_the_judges_disagree_on_first(
    endpoints: dict[str, FakeOpenAI], tmp_path: Path
) -> None:
    run_panel(endpoints, tmp_path)
    out = tmp_path / "report.html"
    assert main(["report", "--db", str(tmp_path / "ragjury.db"), "--out", str(out)]) == 0
    shown = [s["id"] for s in page_data(out.read_text(encoding="utf-8"))["samples"]]
    assert set(shown[:3]) == {"s2", "s3", "s4"}  # a judge dissented on each
    assert shown[3] == "s1"


def test_a_judge_whose_endpoint_refuses_every_connection_stops_the_run_with_4(
    endpoints: dict[str, FakeOpenAI], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as taken:  # a port of this machine that nothing listens on
        taken.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{taken.getsockname()[1]}/v1"
    flag = f"a=model-a@{endpoints['a'].base_url},down=model-d@{closed}"
    code = evaluate(
        endpoints["a"], tmp_path, samples(tmp_path), "--metrics", "correctness",
        "--judges", flag, "--max-transport-retries", "0",
    )  # fmt: skip
    err = " ".join(capsys.readouterr().err.split())
    assert code == 4, err  # as the run's own endpoint does: stopped, its work kept queued
    assert "correctness_judge@down" in err
    assert f"check that {closed} is up" in err
    assert "unfinished work stays queued" in err
