"""The pytest plugin in real pytest sessions (subprocesses) against the scripted server: the
README's example suite, a failing assertion and its message, and re-runs that make no LLM
request (counted at the server)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from test_readme import PYTEST_SUITE

from evalfakes import script_judges
from fakeopenai import FakeOpenAI

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")

FAILING_SUITE = """
CONTEXTS = ["The Eiffel Tower is in Paris. The tower is made of iron."]


def test_a_grounded_answer_passes(jury):
    jury.assert_faithful("Where is it?", "The Eiffel Tower is in Paris.", CONTEXTS)


def test_an_invented_statement_fails(jury):
    jury.assert_faithful(
        "Where is the Eiffel Tower?",
        "The Eiffel Tower is in Paris. The Eiffel Tower is made of cheese.",
        CONTEXTS,
        min_score=0.8,
    )
"""


def pytest_session(
    folder: Path, test_file: str, fake: FakeOpenAI | None, db: Path
) -> subprocess.CompletedProcess[str]:
    """``pytest test_file`` in ``folder`` as a user runs it, with ragjury's plugin loaded
    the way its entry point loads it (other installed plugins left out: autoload is off)."""
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(folder),
        "PYTHONPATH": str(ROOT),
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        "RAGJURY_DB": str(db),
        "RAGJURY_MODEL": "fake-model",
    }
    if fake is not None:
        env |= {"RAGJURY_BASE_URL": fake.base_url, "OPENAI_API_KEY": "test-key"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "ragjury.pytest_plugin",
            "-p",
            "no:cacheprovider",
            "-q",
            test_file,
        ],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def readme_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", README, re.DOTALL)
    examples = [str(b) for b in blocks if b.startswith(PYTEST_SUITE)]
    assert len(examples) == 1
    return examples[0]


def test_the_readme_example_suite_passes_and_a_rerun_makes_no_llm_request(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    (tmp_path / "test_rag.py").write_text(readme_example(), encoding="utf-8")
    db = tmp_path / "judgements.db"

    first = pytest_session(tmp_path, "test_rag.py", fake, db)

    assert first.returncode == 0, first.stdout + first.stderr
    assert "3 passed" in first.stdout
    asked = len(fake.requests)
    assert {r.agent for r in fake.requests} == {
        "statement_splitter",
        "verdict_judge",
        "correctness_judge",
    }

    second = pytest_session(tmp_path, "test_rag.py", fake, db)

    assert second.returncode == 0, second.stdout + second.stderr
    assert "3 passed" in second.stdout
    assert len(fake.requests) == asked  # everything came from the database


def test_a_failing_assertion_lists_the_unsupported_statements_and_fails_again_from_cache(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    script_judges(fake)
    (tmp_path / "test_suite.py").write_text(FAILING_SUITE, encoding="utf-8")
    db = tmp_path / "judgements.db"

    first = pytest_session(tmp_path, "test_suite.py", fake, db)

    assert first.returncode == 1
    assert "1 failed, 1 passed" in first.stdout
    failure = first.stdout
    assert (
        "AssertionError: faithfulness of the answer to 'Where is the Eiffel Tower?': "
        "0.5 is below 0.8" in failure
    )
    assert "unsupported statements:" in failure
    assert "- 'The Eiffel Tower is made of cheese.': not in the passages" in failure
    assert "The Eiffel Tower is in Paris.': " not in failure  # the supported one is not listed
    asked = len(fake.requests)
    assert asked > 0

    second = pytest_session(tmp_path, "test_suite.py", fake, db)

    assert second.returncode == 1
    assert "1 failed, 1 passed" in second.stdout
    assert "- 'The Eiffel Tower is made of cheese.': not in the passages" in second.stdout
    assert len(fake.requests) == asked


def test_changing_one_answer_asks_only_for_that_answer(fake: FakeOpenAI, tmp_path: Path) -> None:
    script_judges(fake)
    (tmp_path / "test_suite.py").write_text(FAILING_SUITE, encoding="utf-8")
    db = tmp_path / "judgements.db"
    assert pytest_session(tmp_path, "test_suite.py", fake, db).returncode == 1
    before = len(fake.requests)
    fixed = FAILING_SUITE.replace("The Eiffel Tower is made of cheese", "The tower is made of iron")
    (tmp_path / "test_suite.py").write_text(fixed, encoding="utf-8")

    again = pytest_session(tmp_path, "test_suite.py", fake, db)

    assert again.returncode == 0, again.stdout
    new = fake.requests[before:]
    assert [r.agent for r in new] == ["statement_splitter", "verdict_judge"]
    assert "The tower is made of iron" in new[0].text()


def test_the_plugin_is_inert_in_a_session_that_does_not_use_it(tmp_path: Path) -> None:
    (tmp_path / "test_plain.py").write_text("def test_plain():\n    assert 1 + 1 == 2\n")
    db = tmp_path / "never.db"

    done = pytest_session(tmp_path, "test_plain.py", None, db)  # no endpoint configured

    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    assert not db.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["__pycache__", "test_plain.py"]


def test_the_plugin_is_installed_as_a_pytest11_entry_point() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))

    assert project["project"]["entry-points"]["pytest11"] == {"ragjury": "ragjury.pytest_plugin"}
