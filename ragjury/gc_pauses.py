"""Short garbage-collector pauses for ragjury's own long runs.

A full collection walks every object the process holds. Once ragjury, openai, instructor and
pydantic are imported that is about 200,000 objects and 100-200 ms with the event loop
stopped: every request in flight waits that long for its answer to be read, and at
``--concurrency 32`` against a 200 ms endpoint a few such pauses cost a tenth of the
throughput. Nearly all of those objects (modules, classes, schemas) live until the process
exits, so the command-line runs move them out of the collector's reach once, at start-up, with
:func:`gc.freeze`; the collector then only walks what the run itself allocates.

Applications that embed ragjury (:class:`ragjury.Jury`) own their process and their
collector: ragjury leaves them alone. They can call :func:`settle` themselves once their own
start-up is done.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import sys

# Imported on the first request, not at start-up; loaded here so that they are frozen too.
_LAZY_MODULES = ("openai", "ragjury.llm._structured", "instructor.v2.providers.openai.handlers")


def settle(*, llm: bool = True) -> None:
    """Load the modules a run needs, build the models' validators, and freeze everything
    allocated so far. ``llm``: the run may call a model (a run that calls none, keyword
    tests only, never loads the LLM client's modules: about a second).

    No collection first: it would cost as long as the pauses this avoids, and the garbage
    left over from start-up is a few import-time cycles."""
    for name in _LAZY_MODULES if llm else ():
        with contextlib.suppress(ImportError):  # a renamed module is only not preloaded
            importlib.import_module(name)
    build_models()
    gc.freeze()


def build_models() -> None:
    """Build the validators of ragjury's loaded models that defer them (``defer_build``, so
    that ``ragjury --help`` does not): here, in one thread before any work, so that they are
    frozen with the rest and no two threads build one at once (a concurrent first build is
    racy in some pydantic releases)."""
    from pydantic import BaseModel

    for name, module in list(sys.modules.items()):
        if name != "ragjury" and not name.startswith("ragjury."):
            continue
        for value in list(vars(module).values()):
            if (
                isinstance(value, type)
                and issubclass(value, BaseModel)
                and value.__module__ == name
                and not value.__pydantic_complete__
            ):
                value.model_rebuild()
