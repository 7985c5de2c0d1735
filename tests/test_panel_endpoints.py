"""Panel judges as a user declares them in ragjury.toml (``[panel.NAME]``: model, endpoint,
the variable holding its key, concurrency, rpm, tpm, price), each on a scripted server of
its own, and ``--dry-run`` of a panel: every judge x repeat at each judge's price."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from test_panels import QUESTIONS, SCORES, flipping, scripted

from ragjury import LLM, JudgeEndpoint, Jury, Panel, PanelJudge, Settings
from ragjury.cli import main

from calibratecli import calibrate, write_labels
from conftest import make_settings
from evalcli import evaluate, write_jsonl
from fakeopenai import Behaviour, FakeOpenAI

PRICES = {"a": (1.0, 2.0), "b": (0.0, 0.0)}  # USD per million tokens: a paid, b our own


@pytest.fixture
def two_endpoints() -> Iterator[dict[str, FakeOpenAI]]:
    fakes = {name: FakeOpenAI() for name in ("a", "b")}
    for name, fake in fakes.items():
        fake.start()
        fake.route(f"correctness_judge@{name}", scripted(SCORES[name]))
    try:
        yield fakes
    finally:
        for fake in fakes.values():
            fake.stop()


def declare(
    tmp_path: Path,
    fakes: Mapping[str, FakeOpenAI],
    monkeypatch: pytest.MonkeyPatch,
    limits: Mapping[str, str] | None = None,
) -> None:
    """ragjury.toml in the working directory with judges a and b, each on its server."""
    lines = []
    for name, fake in fakes.items():
        price_in, price_out = PRICES[name]
        lines += [
            f"[panel.{name}]",
            f'model = "model-{name}"',
            f'base_url = "{fake.base_url}"',
            f'api_key_env = "JUDGE_{name.upper()}_KEY"',
            f"price = {{ input = {price_in}, output = {price_out} }}",
            (limits or {}).get(name, ""),
            "",
        ]
        monkeypatch.setenv(f"JUDGE_{name.upper()}_KEY", f"key-of-{name}")
    (tmp_path / "ragjury.toml").write_text("\n".join(lines), encoding="utf-8")
    monkeypatch.chdir(tmp_path)


def samples(tmp_path: Path, copies: int = 1) -> Path:
    records = [
        {"id": f"{sid}-{n}", "question": q, "answer": f"Fact {sid}.", "reference": f"Fact {sid}."}
        for sid, q in QUESTIONS.items()
        for n in range(copies)
    ]
    return write_jsonl(tmp_path / "samples.jsonl", records)


def summary(tmp_path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((tmp_path / "summary.json").read_text())
    return loaded


def test_dry_run_counts_every_judge_and_repeat_at_each_judges_price(
    two_endpoints: dict[str, FakeOpenAI], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    declare(tmp_path, two_endpoints, monkeypatch)
    path = samples(tmp_path)
    flags = ("--metrics", "correctness", "--judges", "a,b", "--repeats", "3")
    assert evaluate(None, tmp_path, path, *flags, "--dry-run") == 0
    estimate = summary(tmp_path)
    assert all(fake.requests == [] for fake in two_endpoints.values())
    # 4 samples x 3 repeats for each of two judges, each at its own model
    assert estimate["llm_calls"] == 2 * 3 * 4
    stages = estimate["by_stage"]
    assert set(stages) == {"correctness_judge@a", "correctness_judge@b"}
    for name, stage in ((n, stages[f"correctness_judge@{n}"]) for n in ("a", "b")):
        assert stage["model"] == f"model-{name}"
        assert stage["llm_calls"] == 12
        price_in, price_out = PRICES[name]
        cost = (stage["prompt_tokens"] * price_in + stage["completion_tokens"] * price_out) / 1e6
        assert stage["cost_usd"] == pytest.approx(cost, abs=1e-6)
    assert stages["correctness_judge@a"]["cost_usd"] > 0
    assert estimate["cost_usd"] == pytest.approx(stages["correctness_judge@a"]["cost_usd"])

    assert evaluate(two_endpoints["a"], tmp_path, path, *flags) == 0
    real = summary(tmp_path)
    assert real["llm_calls"] == estimate["llm_calls"]
    assert {s: f["llm_calls"] for s, f in real["by_stage"].items()} == {
        s: f["llm_calls"] for s, f in stages.items()
    }
    # the real run is priced as the estimate was: judge b's endpoint costs nothing
    assert real["panel"]["cost_by_judge"]["b"]["cost_usd"] == 0
    assert real["panel"]["cost_by_judge"]["a"]["cost_usd"] > 0


def test_each_declared_judge_has_its_own_concurrency_and_key_at_its_server(
    two_endpoints: dict[str, FakeOpenAI], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for fake in two_endpoints.values():
        fake.behave(Behaviour(latency=0.05))
    declare(tmp_path, two_endpoints, monkeypatch, {"a": "concurrency = 1", "b": "concurrency = 3"})
    path = samples(tmp_path, copies=4)  # 16 samples
    code = evaluate(
        two_endpoints["a"], tmp_path, path, "--metrics", "correctness", "--judges", "a,b",
        "--concurrency", "8",
    )  # fmt: skip
    assert code in (0, 5)
    a, b = two_endpoints["a"], two_endpoints["b"]
    assert len(a.requests_for("correctness_judge@a")) == 16
    assert len(b.requests_for("correctness_judge@b")) == 16
    assert a.stats()["in_flight_max"] == 1  # judge a's limit, seen at its server
    assert 2 <= b.stats()["in_flight_max"] <= 3  # judge b's own, not a's and not the run's 8
    assert {r.headers["authorization"] for r in a.requests} == {"Bearer key-of-a"}
    assert {r.headers["authorization"] for r in b.requests} == {"Bearer key-of-b"}


def test_a_declared_judge_whose_key_is_not_set_stops_before_any_call(
    two_endpoints: dict[str, FakeOpenAI],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    declare(tmp_path, two_endpoints, monkeypatch)
    monkeypatch.delenv("JUDGE_B_KEY")
    path = samples(tmp_path)
    code = evaluate(two_endpoints["a"], tmp_path, path, "--metrics", "correctness",
                    "--judges", "a,b")  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert "judge 'b': [panel.b] in ragjury.toml takes its API key from JUDGE_B_KEY" in err
    assert all(fake.requests == [] for fake in two_endpoints.values())
    # an undeclared bare name says which judges are declared
    assert main(["evaluate", str(path), "--out", str(tmp_path / "r.jsonl"),
                 "--metrics", "correctness", "--judges", "a,zz"]) == 2  # fmt: skip
    assert "the judges declared in ragjury.toml are a, b" in capsys.readouterr().err


# the person agrees with judge a on every sample (a passes s1, s2 and s4)
HUMAN = {"s1": True, "s2": True, "s3": False, "s4": True}


def test_calibrate_a_panel_gives_each_judges_agreement_with_people_and_the_panels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fakes = {name: FakeOpenAI() for name in SCORES}
    for name, fake in fakes.items():
        fake.start()
        fake.route(f"correctness_judge@{name}", scripted(SCORES[name]))
    try:
        labels = write_labels(
            tmp_path,
            [
                {"id": sid, "question": q, "answer": f"Fact {sid}.", "reference": f"Fact {sid}.",
                 "human": HUMAN[sid]}
                for sid, q in QUESTIONS.items()
            ],
        )  # fmt: skip
        judges = ",".join(f"{n}=model-{n}@{f.base_url}" for n, f in fakes.items())
        args = ("--metric", "correctness", "--judges", judges, "--summary",
                str(tmp_path / "summary.json"))  # fmt: skip
        assert calibrate(None, tmp_path, str(labels), *args, "--dry-run") == 0
        assert summary(tmp_path)["llm_calls"] == 3 * 4
        assert calibrate(None, tmp_path, str(labels), *args, "--json") == 0
        asked = [len(f.requests_for(f"correctness_judge@{n}")) for n, f in fakes.items()]
        assert asked == [4, 4, 4]
    finally:
        for fake in fakes.values():
            fake.stop()
    figures = json.loads(capsys.readouterr().out)
    by_hand = {
        # a: all four as the person; b fails s2; c fails s2 and s4, passes s3
        "a": 4 / 4,
        "b": 3 / 4,
        "c": 1 / 4,
    }
    by_judge = figures["by_judge"]
    assert {n: c["agreement"]["accuracy"]["value"] for n, c in by_judge.items()} == (
        pytest.approx(by_hand)
    )
    assert {n: c["model"] for n, c in by_judge.items()} == {n: f"model-{n}" for n in SCORES}
    # the panel's majority fails s2 (a alone passes it): 3 of 4 agree with the person
    assert figures["agreement"]["accuracy"]["value"] == pytest.approx(3 / 4)
    assert figures["model"].startswith("panel of a (model-a), b (model-b), c (model-c)")
    run = summary(tmp_path)
    assert run["panel"]["metrics"]["correctness"]["disagreements"] == 3
    assert run["calibration"]["by_judge"]["c"]["compared"] == 4
    page = tmp_path / "report.html"
    assert main(["report", "--db", str(tmp_path / "ragjury.db"), "--out", str(page)]) == 0
    html = page.read_text(encoding="utf-8")
    assert "each judge of the panel against the people" in html
    assert '<th scope="row">c (model-c)</th><td class="num">4</td><td>0.250 (' in html
    assert '<th scope="row">the panel</th><td class="num">4</td><td>0.750 (' in html


@pytest.mark.anyio
async def test_a_jury_with_a_panel_asks_each_judge_with_its_declared_key(
    two_endpoints: dict[str, FakeOpenAI], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = two_endpoints["a"], two_endpoints["b"]
    monkeypatch.setenv("JUDGE_B_KEY", "key-of-b")
    settings = make_settings(
        a,
        tmp_path,
        panel={"b": JudgeEndpoint(model="model-b", base_url=b.base_url, api_key_env="JUDGE_B_KEY")},
    )
    panel = Panel(
        judges=(
            PanelJudge(name="a", model="model-a", base_url=a.base_url),
            PanelJudge(name="b", model="model-b", base_url=b.base_url),
        ),
        repeats=2,
    )
    samples = [
        {"id": sid, "question": q, "answer": f"Fact {sid}.", "reference": f"Fact {sid}."}
        for sid, q in QUESTIONS.items()
    ]
    async with Jury(settings, panel=panel) as jury:
        judged = await jury.evaluate(samples, metrics=["correctness"])
    # each of 4 samples asked twice of each judge, above temperature 0
    assert len(a.requests_for("correctness_judge@a")) == 8
    assert len(b.requests_for("correctness_judge@b")) == 8
    assert {r.body["temperature"] for r in (*a.requests, *b.requests)} == {0.7}
    assert {r.headers["authorization"] for r in b.requests} == {"Bearer key-of-b"}
    assert {r.headers["authorization"] for r in a.requests} == {"Bearer test-key"}
    for result in judged:
        sid = result.sample.id
        votes = [SCORES[j][sid] >= 4 for j in ("a", "b")]
        correctness = result["correctness"]
        assert correctness.passing is all(votes)  # two judges: a tie fails
        assert correctness.details["panel"]["answered"] == 2
        assert correctness.details["panel"]["repeats"] == 2


@pytest.mark.anyio
async def test_a_declared_judge_paces_its_own_client_and_lends_nothing_to_another_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JUDGE_A_KEY", "key-of-a")
    declared = JudgeEndpoint(
        model="model-a",
        base_url="http://127.0.0.1:9/v1",
        api_key_env="JUDGE_A_KEY",
        concurrency=2,
        rpm=30,
        tpm=5000,
    )
    settings = Settings(
        base_url="http://127.0.0.1:8/v1", api_key="run-key", model="m", rpm=1000,
        panel={"a": declared},
    )  # fmt: skip
    async with LLM(settings) as llm:
        a = llm.sibling("a", "model-a", "http://127.0.0.1:9/v1", 0.0)
        assert (a.limiter.rpm, a.limiter.tpm) == (30, 5000)
        assert (a.settings.concurrency, a.settings.api_key) == (2, "key-of-a")
        # the same name for another model is not the declared judge: the run's settings
        other = llm.sibling("a", "model-z", "http://127.0.0.1:9/v1", 0.0)
        assert (other.limiter.rpm, other.settings.api_key) == (1000, "run-key")


def test_calibrate_with_repeats_reports_the_flaky_samples_of_a_judge_that_flips(
    fake: FakeOpenAI, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.route("correctness_judge@judge", flipping())
    labels = write_labels(
        tmp_path,
        [
            {"id": sid, "question": q, "answer": f"Fact {sid}.", "reference": f"Fact {sid}.",
             "human": HUMAN[sid]}
            for sid, q in QUESTIONS.items()
        ],
    )  # fmt: skip
    summary_path = str(tmp_path / "summary.json")
    flags = ("--metric", "correctness", "--repeats", "3", "--summary", summary_path, "--json")
    assert calibrate(fake, tmp_path, str(labels), *flags) == 0
    assert len(fake.requests_for("correctness_judge@judge")) == 12  # 4 samples x 3 repeats
    assert {r.body["temperature"] for r in fake.requests} == {0.7}
    figures = json.loads(capsys.readouterr().out)
    # each sample's three answers are 5, 2, 5: the majority passes every sample
    assert figures["by_judge"]["judge"]["agreement"]["accuracy"]["value"] == pytest.approx(3 / 4)
    panel = summary(tmp_path)["panel"]["metrics"]["correctness"]
    assert (panel["flaky_samples"], panel["flaky_share"]) == (4, 1.0)


@pytest.mark.parametrize(
    ("table", "said"),
    [
        ('[panel.a]\nmodel = "m"\nconcurency = 2\n',
         "[panel.a] in ragjury.toml: concurency: extra inputs are not permitted"),
        ('[panel.a]\nmodel = "m"\nbase_url = "localhost:8000"\n',
         "[panel.a] in ragjury.toml: base_url: value error, base_url must be an http(s) URL"),
        ('[panel.a]\nmodel = "m"\napi_key_env = "sk-secret-123"\n',
         "[panel.a] in ragjury.toml: api_key_env: value error, api_key_env names the "
         "environment variable holding the key"),
    ],
)  # fmt: skip
def test_a_bad_declared_judge_is_named_with_the_fix_and_a_key_is_never_repeated(
    table: str,
    said: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "ragjury.toml").write_text(table, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    path = samples(tmp_path)
    assert main(["evaluate", str(path), "--out", str(tmp_path / "r.jsonl"),
                 "--metrics", "correctness", "--judges", "a"]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert said in err
    assert "sk-secret-123" not in err
