"""Grading as submissions arrive: ``python -m grader watch`` (docs/instructors/watch.md).

A long-running service over the wings the batch commands use. It watches nbgrader's exchange
``inbound/`` (and, optionally, a folder an LMS sync fills: ``arrivals``), collects what arrived
with ``intake``, queues what the gradebook does not hold yet (``backlog``: each student's newest
submission, first come first served, a limit of graded submissions per student and hour before
the due date), grades it on warm runners kept between submissions with ``grading.batch``
(``judging`` also keeps each exercise's visible check apart), records it in the gradebook with
``records`` and hands the student's feedback back through nbgrader's feedback exchange
(``handback``: before the due date what the lesson's settings allow, ``settings``; after it the
full page). ``service`` ties them together, with one log line per submission and a health line.

Everything it knows survives a restart: the gradebook says what is graded (from which files),
and ``handback``'s ledger what was handed back; a restart collects, grades and hands back only
what is missing.
"""

from .service import Watcher, watch
from .settings import SettingsError, WatchSettings

__all__ = ["SettingsError", "WatchSettings", "Watcher", "watch"]
