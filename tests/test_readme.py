"""The README's configuration table names every setting the config knows."""

from __future__ import annotations

from pathlib import Path

from tests.agentik.config.settings_rows import setting_keys

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_every_setting_is_in_the_readme_config_table_with_its_env_var_and_toml_key() -> None:
    rows = [line for line in README.splitlines() if line.startswith("| ")]
    for _, env, toml_key in setting_keys():
        assert any(f"`{env}`" in row and f"`{toml_key}`" in row for row in rows), (
            f"README.md's configuration table lacks {env} / {toml_key}"
        )


def test_the_readme_shows_the_two_commands() -> None:
    assert "make run" in README
    assert "make test" in README
