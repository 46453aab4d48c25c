"""One construct per capability, each built from the shared descriptions in `hermes_gateway.resources`.

(Not named `constructs`: `python infra/app.py` would otherwise risk shadowing the `constructs` package.)
"""
