"""Records: nbgrader's gradebook, the one source of truth for grades, and what it is read with.

``gradebook`` writes each result as it comes, with the autograded notebook the formgrader shows
(``autograded``, made inert by ``inert``: nothing of a student's runs in the instructor's page);
``standings`` reads what each submission counts with (a score a human set wins, less the late
penalty); ``lateness`` is the course file's due dates and late policy; ``database`` is the
gradebook's database, SQLite or PostgreSQL.
"""
