"""The post-call webhooks' settings (``parley serve --webhook-url URL --webhook-secret SECRET``)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from telephony.errors import ConfigError

__all__ = ["WebhookConfig"]

MIN_SECRET_CHARS = 16


@dataclass(frozen=True)
class WebhookConfig:
    """Where the events go and how hard to try. Raises :class:`ConfigError` in one line when a
    setting cannot work, so ``parley serve`` refuses to start rather than lose events later.

    Backoff: attempt ``n`` (from 1) failed -> the next waits ``min(backoff_cap_s, backoff_base_s *
    2 ** (n - 1))``, +-``jitter`` of it; an event still undelivered ``give_up_after_s`` after the
    call ended is given up (logged, kept in the outbox with ``failed_at``)."""

    url: str
    secret: str
    timeout_s: float = 10.0          # one attempt: connect, send, the receiver's answer
    backoff_base_s: float = 1.0
    backoff_cap_s: float = 300.0
    jitter: float = 0.2
    give_up_after_s: float = 3 * 24 * 3600.0
    batch: int = 8                   # attempts in flight at once
    poll_s: float = 5.0              # look at the outbox at least this often (other servers' items)

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in self.url):
            raise ConfigError(f"--webhook-url must be an http:// or https:// URL with a host, not {self.url!r}")
        try:
            parts.port  # noqa: B018 - raises on a port out of range or not a number
        except ValueError:
            raise ConfigError(f"--webhook-url {self.url!r}: the port is not a number in 0..65535") from None
        if not self.secret:
            raise ConfigError("--webhook-url needs a signing secret: --webhook-secret or PARLEY_WEBHOOK_SECRET")
        if len(self.secret) < MIN_SECRET_CHARS:
            raise ConfigError(f"the webhook secret is {len(self.secret)} characters: use at least "
                              f"{MIN_SECRET_CHARS} (e.g. `openssl rand -hex 32`)")
        for name in ("timeout_s", "backoff_base_s", "backoff_cap_s", "give_up_after_s", "poll_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"webhook {name} must be positive, not {getattr(self, name)}")
        if not 0 <= self.jitter < 1 or self.batch < 1:
            raise ConfigError(f"webhook jitter must be in [0, 1) and batch at least 1 ({self.jitter}, {self.batch})")

    @property
    def url_shown(self) -> str:
        """The URL without its query or credentials (for logs)."""
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}{parts.path}"

    def backoff_s(self, attempts: int, unit: float = 0.5) -> float:
        """The wait after ``attempts`` failed attempts; ``unit`` in [0, 1) places it in the jitter."""
        wait = min(self.backoff_cap_s, self.backoff_base_s * 2.0 ** max(0, attempts - 1))
        return wait * (1.0 + self.jitter * (2.0 * unit - 1.0))
