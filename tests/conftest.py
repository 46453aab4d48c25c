"""Test-wide plugins: the fake platform and model servers' fixtures, and Hypothesis without its
per-example deadline (a timing assertion: speed is measured in bench/, never asserted in tests, and
a busy machine made property tests fail on time alone)."""

from hypothesis import settings

pytest_plugins = ("tests.fakes.telegram_server", "tests.fakes.openai_server")

settings.register_profile("gateway", deadline=None)
settings.load_profile("gateway")
