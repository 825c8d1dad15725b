"""What the tests share: answers as students write them (answers/, by lesson) and running checks
on them (checking), lesson 05's model (copy_task), inputs, oracles, the notebooks, the gradebook
seen from a test, servers and clusters started for a test, and driving JupyterLab in a browser
(lab_pages). Imported as ``from helpers.<module> import ...`` (pytest puts tests/ on the path;
see pyproject.toml), never by a test module from another test module."""
