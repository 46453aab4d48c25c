"""Fakes that obey the same rules as the real services.

Each fake module may also be a pytest plugin (its fixtures); registering them for assertion
rewriting here keeps pytest quiet when a test imports a fake before naming it in `pytest_plugins`.
"""

import pkgutil

import pytest

pytest.register_assert_rewrite(*(f"{__name__}.{module.name}" for module in pkgutil.iter_modules(__path__)))
