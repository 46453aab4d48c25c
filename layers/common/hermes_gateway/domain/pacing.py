"""How far apart one chat's sends go where its platform limits them (services.delivery paces them):
Telegram lets a bot send a group about 20 messages a minute, and answers more with 429s."""

from __future__ import annotations

from dataclasses import dataclass

MARGIN = 1.01


@dataclass(frozen=True)
class PaceRule:
    """How one chat's sends are spaced, where its platform limits them (a Telegram group: 20 a
    minute): one every `interval` seconds, `burst` of them at once after a quiet spell."""

    interval: float
    burst: int = 1

    @property
    def tolerance(self) -> float:
        return (self.burst - 1) * self.interval

    @classmethod
    def per_minute(cls, sends: int, burst: int) -> PaceRule | None:
        """At most `sends` in any minute, `burst` of them at once (None: `sends` is 0, not paced).
        The burst and a send every interval after it fill one minute; the interval is 1% longer,
        for the clocks of the instances that share a chat's slots."""
        if sends <= 0:
            return None
        burst = max(1, min(burst, sends))
        return cls(round(60.0 / max(1, sends - burst + 1) * MARGIN, 3), burst)
