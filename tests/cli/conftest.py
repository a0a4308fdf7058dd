"""The `in_tmp` fixture: run a command in an empty folder."""

import pytest


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """Run in an empty folder; after the test, the folder holds only what the test itself created."""
    monkeypatch.chdir(tmp_path)
    return tmp_path
