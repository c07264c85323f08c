"""Digest auth on a live server: a captured Authorization starts no call of its own, and a
half-set credential pair refuses to start `parley serve` instead of switching auth off."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from telephony.sip.digest import DigestChallenge, authorization

from .conftest import UdpPeer, hang_up, in_dialog, invite

ROOT = Path(__file__).resolve().parents[3]


async def test_a_replayed_authorization_header_is_challenged_again(make_sip_server, seen):
    """Regression: the same Authorization header, sent again with a new Call-ID, started a
    second call for the nonce's whole lifetime."""
    server = await make_sip_server(credentials=(("alice", "s3cret"),))
    peer = await UdpPeer.open()
    try:
        peer.send(invite(peer, "auth-1"), server)
        challenged = (await peer.responses())[-1]
        assert challenged.status == 401
        peer.send(in_dialog("ACK", challenged, 1, peer.port, via_branch=challenged.top_via.branch), server)
        challenge = DigestChallenge.parse(challenged.header("www-authenticate") or "")
        header = str(authorization(challenge, "INVITE", "sip:parley@127.0.0.1", "alice", "s3cret"))
        peer.send(invite(peer, "auth-1", cseq=2, extra=(("Authorization", header),)), server)
        ok = (await peer.responses())[-1]
        assert ok.status == 200 and seen.agents == 1

        peer.send(invite(peer, "auth-replay", extra=(("Authorization", header),)), server)  # the capture
        replay = (await peer.responses())[-1]
        assert replay.status == 401 and seen.agents == 1 and list(server.live) == ["auth-1"]

        await hang_up(peer, server, ok)
        assert not server.live
    finally:
        peer.close()


def test_a_user_without_a_password_refuses_to_start():
    """Regression: PARLEY_SIP_USER with an empty PARLEY_SIP_PASSWORD silently switched auth off."""
    env = {**os.environ, "PARLEY_SIP_USER": "trunk", "PARLEY_SIP_PASSWORD": ""}
    done = subprocess.run([sys.executable, "-m", "deploy.cli", "serve", "--sip-port", "0", "--port", "0"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == (
        "parley serve: PARLEY_SIP_USER is set but PARLEY_SIP_PASSWORD is empty or unset: SIP digest auth "
        "needs both (unset both to answer SIP callers without auth)")
