"""What several test modules share: scripted and real servers, toy tables, tiny models, file helpers.

Fixtures are in ``tests/conftest.py``; the helpers here are plain functions and classes, imported as
``from tests.support.<module> import ...``.
"""
