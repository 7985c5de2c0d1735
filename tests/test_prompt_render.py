"""Prompt templates render as Jinja renders them: its globals included, nothing kept from one
render to the next."""

from __future__ import annotations

import jinja2

from ragjury.prompts import Prompt

SOURCE = """You grade{% for n in range(2) %} [{{ n }}]{% endfor %}.
{% set ns = namespace(total=0) %}{% for x in items %}{% set ns.total = ns.total + x %}{% endfor %}
Total {{ ns.total }}; {{ dict(a=1)["a"] }}.
--- user ---
Question: {{ question }}
{% for c in contexts %}- {{ c }}
{% endfor %}"""


def jinja_render(source: str, **variables: str | list[str] | list[int]) -> str:
    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True, autoescape=False
    )
    return env.from_string(source).render(**variables).strip()


def test_a_template_using_jinjas_globals_renders_as_jinja_renders_it() -> None:
    prompt = Prompt(name="custom", source=SOURCE)
    system, user = SOURCE.split("--- user ---")
    for question, contexts, items in (("Why?", ["a", "b"], [1, 2]), ("How?", [], [5])):
        messages = prompt.render(question=question, contexts=contexts, items=items)
        assert messages == [
            {"role": "system", "content": jinja_render(system, items=items)},
            {"role": "user", "content": jinja_render(user, question=question, contexts=contexts)},
        ]
    assert "Total 5; 1." in messages[0]["content"]  # the second render's own
    assert messages[1]["content"] == "Question: How?"


def test_a_builtin_prompt_rendered_again_holds_only_the_new_variables() -> None:
    prompt = Prompt.builtin("correctness")
    first = prompt.render(question="Q1", answer="A1", reference="R1")
    second = prompt.render(question="Q2", answer="A2", reference="R2")
    assert "Q1" in first[-1]["content"]
    assert "Q1" not in second[-1]["content"]
    assert first[0] == second[0]
