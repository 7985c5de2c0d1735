"""See and gate results: the HTML report, comparison of two runs, CI gates, JUnit and Markdown.

Everything here reads what ``generate``, ``evaluate`` and ``export`` write (or the database
through :func:`ragjury.report.load.records_from_db`); none of it calls an LLM.
"""
