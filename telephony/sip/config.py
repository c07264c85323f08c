"""SIP server configuration: frozen dataclasses that validate themselves."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from telephony.sip.errors import SipConfigError

__all__ = ["RegistrationConfig", "SipConfig"]


@dataclass(frozen=True)
class RegistrationConfig:
    """REGISTER parley at a PBX / registrar as ``username`` (digest auth answered with ``password``)."""

    registrar_host: str
    username: str
    password: str
    registrar_port: int = 5060
    domain: str | None = None  # the address-of-record's domain; the registrar host when None
    expires_s: int = 300
    timeout_s: float = 5.0
    retry_s: float = 30.0

    def __post_init__(self):
        if not self.registrar_host or not self.username:
            raise SipConfigError("registration needs registrar_host and username")
        if not 0 < self.registrar_port < 65536:
            raise SipConfigError(f"bad registrar_port {self.registrar_port}")
        if not 60 <= self.expires_s <= 86_400:
            raise SipConfigError(f"expires_s {self.expires_s} is outside 60..86400")

    @property
    def aor(self) -> str:
        return f"sip:{self.username}@{self.domain or self.registrar_host}"


@dataclass(frozen=True)
class SipConfig:
    """Where and how parley answers SIP calls.

    ``allowed_networks``: source networks (CIDR) whose requests are served; anything else gets
    403. ``credentials``: (user, password) pairs; when set, an INVITE must answer a 401 digest
    challenge. ``ring_s``: how long 180 Ringing is held before the 200 OK (a window for CANCEL).
    """

    host: str = "127.0.0.1"
    port: int = 5060
    advertised_ip: str | None = None  # put in Contact and SDP; ``host`` when None
    rtp_port_min: int = 10_000
    rtp_port_max: int = 10_999
    allowed_networks: tuple[str, ...] = ("127.0.0.0/8", "::1/128")
    credentials: tuple[tuple[str, str], ...] = ()
    realm: str = "parley"
    codecs: tuple[str, ...] = ("PCMU", "PCMA")
    ring_s: float = 0.0
    jitter_depth_packets: int = 3
    max_calls: int = 50
    no_ack_timeout_s: float = 32.0
    # a caller that sends no RTP for this long has gone (a crashed PBX, a lost network) and no BYE
    # will come: the call is ended (BYE sent, record kept). On hold with no media flowing
    # (``a=inactive``, or a zero address) the wait is ``rtp_hold_timeout_s``. 0 turns either off.
    rtp_timeout_s: float = 30.0
    rtp_hold_timeout_s: float = 300.0
    request_timeout_s: float = 5.0  # our BYE / REFER / NOTIFY transactions
    transfer_timeout_s: float = 15.0  # REFER accepted -> the NOTIFY saying the transfer finished
    registration: RegistrationConfig | None = None
    reraise_call_errors: bool = False  # tests: a call's failure propagates after clean-up

    def __post_init__(self):
        if not 0 <= self.port < 65536:
            raise SipConfigError(f"bad SIP port {self.port}")
        if not 1024 <= self.rtp_port_min <= self.rtp_port_max < 65536 or self.rtp_port_max - self.rtp_port_min < 1:
            raise SipConfigError(f"bad RTP port range {self.rtp_port_min}-{self.rtp_port_max}")
        try:
            for net in self.allowed_networks:
                ipaddress.ip_network(net, strict=False)
        except ValueError as exc:
            raise SipConfigError(f"bad allowed network: {exc}") from exc
        if not set(c.upper() for c in self.codecs) <= {"PCMU", "PCMA"} or not self.codecs:
            raise SipConfigError(f"codecs must be PCMU and/or PCMA, not {self.codecs}")
        if ipaddress.ip_address(self.host).is_unspecified and not self.advertised_ip:
            raise SipConfigError(f"host {self.host} needs advertised_ip (the address callers reach)")
        for name in ("rtp_timeout_s", "rtp_hold_timeout_s"):
            value = getattr(self, name)
            if value != 0 and not 2 <= value <= 3600:
                raise SipConfigError(f"{name} {value}: 0 (off) or 2..3600 s")
        if not 0 <= self.ring_s <= 60 or not 0 <= self.jitter_depth_packets <= 50 or self.max_calls < 1:
            raise SipConfigError("ring_s, jitter_depth_packets or max_calls out of range")
        for pair in self.credentials:
            if len(pair) != 2 or not pair[0]:
                raise SipConfigError("credentials are (user, password) pairs")

    @property
    def contact_ip(self) -> str:
        return self.advertised_ip or self.host

    def source_allowed(self, ip: str) -> bool:
        try:
            addr = ipaddress.ip_address(ip)
        except ValueError:
            return False
        return any(addr in ipaddress.ip_network(n, strict=False) for n in self.allowed_networks)
