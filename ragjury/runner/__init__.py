"""The runner: the one layer between what users call and the pipelines.

Three layers run a job. The entry points (the CLI commands, :class:`~ragjury.jury.Jury`,
``serve``) build its typed spec and submit it (:func:`submit_documents`,
:func:`submit_samples`). The runner executes jobs: intake of queued items, the agents'
workers over the bus, completion, progress to the caller's listener, shutdown
(:class:`Runner`, :func:`run_job`). The pipelines and their agents are below it and return
events; they never call up.
"""

from ragjury.runner.progress import EventListener, RunCounts
from ragjury.runner.runner import (
    INLINE_ITEMS_IN_FLIGHT,
    INTAKE,
    JobRun,
    Runner,
    evaluate_in_memory,
    intake_capacity,
    run_job,
)
from ragjury.runner.submit import scored_samples, submit_documents, submit_samples
from ragjury.runner.workers import select_roles, workers_for

__all__ = [
    "INLINE_ITEMS_IN_FLIGHT",
    "INTAKE",
    "EventListener",
    "JobRun",
    "RunCounts",
    "Runner",
    "evaluate_in_memory",
    "intake_capacity",
    "run_job",
    "scored_samples",
    "select_roles",
    "submit_documents",
    "submit_samples",
    "workers_for",
]
