"""Fixtures shared by test directories that do not share a conftest."""

pytest_plugins = ("tests.fakes.a2a_sdk_fixtures",)
