"""The domain's rules as the settings give them: here, not in the domain, because the settings
import the domain (a reset policy's parser, the modes) and the domain imports no settings."""

from __future__ import annotations

from dataclasses import replace

from hermes_gateway.domain.reset_policy import PolicyTable, ResetPolicy, SessionRules, parse_policy_map
from hermes_gateway.domain.retention import DAY_SECONDS, capped_days
from hermes_gateway.domain.session_key import key_namespace
from hermes_gateway.settings.model import Settings


def rules_from_settings(settings: Settings) -> SessionRules:
    """The session stores' rules from validated settings (load_settings already checked every
    policy), with each named profile's own."""
    own = _profile_rules(settings)
    if not settings.profiles:
        return own
    named = {key_namespace(p.profile): _profile_rules(p) for p in settings.profiles.values()}
    return replace(own, by_namespace=named)


def _profile_rules(settings: Settings) -> SessionRules:
    s = settings.sessions
    default = ResetPolicy(s.reset_mode, s.reset_idle_minutes, s.reset_at_hour)
    by_platform = {
        name: parse_policy_map(p.reset_policy, default) for name, p in settings.platforms.items() if p.reset_policy
    }
    return SessionRules(
        PolicyTable(default, parse_policy_map(s.reset_policy, default), by_platform),
        settings.time_zone,
        s.resume_window_seconds,
        lease_ttl_seconds=s.lease_ttl_seconds,
        # an idle route holds the chat's origin (names, ids): it goes no later than the retention
        route_ttl_seconds=capped_days(s.route_max_idle_days, s.retention_days) * DAY_SECONDS,
        retention_seconds=s.retention_days * DAY_SECONDS,
    )
