"""Test-wide plugins: the fake platform and model servers' fixtures."""

pytest_plugins = ("tests.fakes.telegram_server", "tests.fakes.openai_server")
