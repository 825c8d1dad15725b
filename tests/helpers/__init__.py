"""What the tests share: notebooks, oracles, answers, the gradebook seen from a test, servers and
clusters started for a test. Imported as ``from helpers.<module> import ...`` (pytest puts tests/
on the path; see pyproject.toml)."""
