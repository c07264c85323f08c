"""SipConfig validates itself; the source allow-list matches CIDR networks."""

from __future__ import annotations

import pytest

from telephony.sip import RegistrationConfig, SipConfig, SipConfigError


def test_defaults_allow_only_loopback():
    config = SipConfig()
    assert config.port == 5060 and (config.rtp_port_min, config.rtp_port_max) == (10_000, 10_999)
    assert config.source_allowed("127.0.0.1") and config.source_allowed("::1")
    assert not config.source_allowed("203.0.113.7") and not config.source_allowed("not-an-ip")


def test_allowed_networks():
    config = SipConfig(allowed_networks=("203.0.113.0/24", "2001:db8::/32"))
    assert config.source_allowed("203.0.113.200") and config.source_allowed("2001:db8::1")
    assert not config.source_allowed("203.0.114.1") and not config.source_allowed("127.0.0.1")


@pytest.mark.parametrize("overrides", [
    {"port": 70000}, {"rtp_port_min": 20000, "rtp_port_max": 19000}, {"rtp_port_min": 80},
    {"allowed_networks": ("10.0.0.0/33",)}, {"codecs": ("G729",)}, {"codecs": ()},
    {"host": "0.0.0.0"},  # callers cannot reach 0.0.0.0: advertised_ip is needed
    {"ring_s": -1}, {"max_calls": 0}, {"credentials": (("", "pw"),)},
])
def test_bad_configs_are_refused(overrides):
    with pytest.raises(SipConfigError):
        SipConfig(**overrides)


def test_public_bind_with_advertised_ip():
    config = SipConfig(host="0.0.0.0", advertised_ip="198.51.100.4")
    assert config.contact_ip == "198.51.100.4"


def test_registration_config():
    reg = RegistrationConfig(registrar_host="pbx.example.com", username="parley", password="pw")
    assert reg.aor == "sip:parley@pbx.example.com"
    with pytest.raises(SipConfigError):
        RegistrationConfig(registrar_host="pbx", username="u", password="p", expires_s=5)


async def test_a_sip_port_in_use_is_one_clear_error(sip_server):
    from telephony.sip import SipServer

    other = SipServer(SipConfig(port=sip_server.port), agent_factory=lambda _i: None)
    with pytest.raises(SipConfigError, match=f"cannot listen for SIP on udp://127.0.0.1:{sip_server.port}"):
        await other.start()
