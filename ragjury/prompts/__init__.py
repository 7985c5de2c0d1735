"""Prompt templates: one Jinja2 file per agent, each with a version hash.

A template has a system part and a user part, separated by a line that reads ``--- user ---``.
The version is a hash of the template source, so a changed prompt never reuses a cached step.
Users can pass their own template file with the same variables (``Prompt.from_path``).
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragjury.errors import ConfigurationError

if TYPE_CHECKING:
    import jinja2

_SEPARATOR = "--- user ---"


@functools.cache
def _environment() -> jinja2.Environment:
    """Made when a template is first compiled: the metric declarations name prompts, and the
    command line's ``--help`` reads the declarations without rendering anything."""
    import jinja2

    return jinja2.Environment(
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=False,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


@functools.lru_cache(maxsize=256)
def _compiled(source: str) -> jinja2.Template:
    """Compile a template part once: compiling costs more than rendering (milliseconds per
    call, which on a busy run is what keeps the endpoint from being kept busy).

    Its globals (Jinja's ``range``, ``dict``, ...) are made a plain dict: Jinja keeps them as
    a ``ChainMap`` over the environment's, and walking that map into every render's context
    was three quarters of a render (about 30 of 40 us). The environment's globals never
    change once it is made, so the copy holds the same names."""
    template = _environment().from_string(source)
    template.globals = dict(template.globals)
    return template


@dataclass(frozen=True)
class Prompt:
    """A named, versioned template that renders to chat messages."""

    name: str
    source: str
    origin: str = "builtin"
    version: str = field(init=False)

    def __post_init__(self) -> None:
        if _SEPARATOR not in self.source:
            raise ConfigurationError(
                f"prompt {self.name!r} ({self.origin}) has no {_SEPARATOR!r} line; put the "
                f"system instructions above that line and the user message below it"
            )
        digest = hashlib.sha256(self.source.encode()).hexdigest()[:12]
        object.__setattr__(self, "version", f"{self.name}@{digest}")

    @classmethod
    def builtin(cls, name: str) -> Prompt:
        path = resources.files("ragjury.prompts").joinpath("templates", f"{name}.j2")
        try:
            source = path.read_text(encoding="utf-8")
        except FileNotFoundError as exc:
            raise ConfigurationError(f"there is no built-in prompt named {name!r}") from exc
        return cls(name=name, source=source)

    @classmethod
    def from_path(cls, name: str, path: Path) -> Prompt:
        try:
            source = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError(
                f"cannot read the {name} prompt template {str(path)!r}: {exc.strerror}; "
                "check the path"
            ) from exc
        return cls(name=name, source=source, origin=str(path))

    def render(self, **variables: Any) -> list[dict[str, str]]:
        import jinja2

        try:
            system, user = (
                _compiled(part).render(**variables).strip()
                for part in self.source.split(_SEPARATOR, 1)
            )
        except jinja2.TemplateError as exc:
            raise ConfigurationError(
                f"prompt {self.name!r} ({self.origin}) failed to render: {exc}; "
                f"it is given: {', '.join(sorted(variables))}"
            ) from exc
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": user})
        return messages


def builtin_names() -> tuple[str, ...]:
    """The names of the built-in templates, sorted."""
    folder = resources.files("ragjury.prompts").joinpath("templates")
    return tuple(
        sorted(p.name.removesuffix(".j2") for p in folder.iterdir() if p.name.endswith(".j2"))
    )


GENERATION_PROMPTS = (
    "generator",
    "generator_reasoning",
    "generator_multi_hop",
    "generator_comparative",
    "generator_persona",
    "groundedness",
    "relevance",
    "relevance_persona",
    "standalone",
    "reference_answer",
    "personas",
    "answerability",
    "answer_agreement",
)
"""The templates dataset generation renders: the generator's (factoids, the other question
types, what a persona adds), its critics' (relevance for a persona too; the answerability
critic's two), the reference answer writer's and the persona proposal's
(``--personas auto``)."""


def load_overrides(specs: list[str], names: tuple[str, ...]) -> dict[str, Prompt]:
    """``--prompt NAME=PATH`` values as prompts, checked against the command's prompt names."""
    prompts = {}
    for spec in specs:
        name, _, path = spec.partition("=")
        if name not in names:
            raise ConfigurationError(
                f"--prompt {spec!r}: unknown prompt {name!r}; use one of {', '.join(names)}"
            )
        prompts[name] = Prompt.from_path(name, Path(path))
    return prompts


__all__ = ["GENERATION_PROMPTS", "Prompt", "builtin_names", "load_overrides"]
