"""Hermes Serverless Gateway: the shared package deployed as the common Lambda layer."""

__version__ = "0.1.0"
