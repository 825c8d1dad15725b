"""Records: nbgrader's gradebook, the one source of truth for grades, and what it is read with.

``gradebook`` writes each result as it comes; ``standings`` reads what each submission counts
with (a score a human set wins, less the late penalty); ``lateness`` is the course file's due
dates and late policy; ``database`` is the gradebook's database, SQLite or PostgreSQL.
"""
