"""Two SIP servers behind a real Kamailio dispatcher (OPTIONS probing, round robin): calls spread
over both; one is drained (SIGTERM's drain): its OPTIONS answer 503, Kamailio marks it inactive and
sends every new call to the other, while the call it holds goes on and ends normally."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path


from telephony.sip.message import SipResponse

from .conftest import KAMAILIO_MODULES, UdpPeer, free_udp_port, hang_up, in_dialog, invite, kamailio

DISPATCHER_CFG = """#!KAMAILIO
debug=2
log_stderror=yes
children=2
auto_aliases=no
listen=udp:127.0.0.1:{port}
mpath="{modules}"
loadmodule "tm.so"
loadmodule "sl.so"
loadmodule "rr.so"
loadmodule "pv.so"
loadmodule "siputils.so"
loadmodule "xlog.so"
loadmodule "textops.so"
loadmodule "dispatcher.so"
modparam("dispatcher", "list_file", "{workdir}/dispatcher.list")
modparam("dispatcher", "ds_ping_interval", 1)
modparam("dispatcher", "ds_probing_mode", 1)
modparam("dispatcher", "ds_probing_threshold", 1)
modparam("dispatcher", "ds_inactive_threshold", 1)
modparam("dispatcher", "ds_ping_from", "sip:dispatcher@127.0.0.1")

request_route {{
    if (has_totag()) {{
        if (loose_route()) {{ t_relay(); exit; }}
        sl_send_reply("404", "Not here");
        exit;
    }}
    if (!ds_select_dst("1", "4")) {{
        xlog("L_NOTICE", "NO-DESTINATION $rm\\n");
        sl_send_reply("503", "No destination");
        exit;
    }}
    xlog("L_NOTICE", "DISPATCH $rm $ci to $du\\n");
    if (is_method("INVITE")) {{ record_route(); }}
    t_relay();
}}
"""


@contextlib.asynccontextmanager
async def dispatcher(ports: list[int], workdir: Path):
    """Kamailio's dispatcher in front of ``ports`` -> (its port, its log's path)."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_udp_port()
    (workdir / "dispatcher.list").write_text("".join(f"1 sip:127.0.0.1:{p}\n" for p in ports))
    config = DISPATCHER_CFG.format(port=port, modules=f"{KAMAILIO_MODULES}/", workdir=workdir)
    async with kamailio(config, workdir, needs=("dispatcher.so",)) as log_path:
        yield port, log_path


async def _call(peer: UdpPeer, proxy_port: int, call_id: str, servers) -> tuple[object, SipResponse]:
    """An INVITE through the dispatcher -> (the server that took it, its 200)."""
    peer.send(invite(peer, call_id), proxy_port)
    def final(m) -> bool:
        return isinstance(m, SipResponse) and m.status >= 200 and m.call_id == call_id

    msgs = await peer.messages(10.0, until=final)
    ok = next(m for m in msgs if final(m))
    assert ok.status == 200, (ok.status, ok.reason)
    took = [s for s in servers if call_id in s.live]
    assert len(took) == 1, (call_id, [list(s.live) for s in servers], [m.status for m in msgs if isinstance(m, SipResponse)])
    return took[0], ok


async def test_a_drained_server_leaves_the_dispatcher_and_its_live_call_finishes(make_sip_server, tmp_path):
    a, b = await make_sip_server(), await make_sip_server()
    peer = await UdpPeer.open()
    try:
        async with dispatcher([a.port, b.port], tmp_path / "kamailio") as (proxy, log_path):
            await asyncio.sleep(1.5)                      # both probed (OPTIONS answered 200)
            took = []
            for n in range(4):                            # round robin over both
                server, ok = await _call(peer, proxy, f"spread-{n}", (a, b))
                took.append(server)
                await hang_up(peer, server, ok)
            assert took.count(a) == 2 and took.count(b) == 2, [s.port for s in took]
            held = None
            for n in range(4):                            # a call on A that stays up
                server, ok = await _call(peer, proxy, f"held-{n}", (a, b))
                if server is a:
                    held = ok
                    peer.send(in_dialog("ACK", ok, 1, peer.port), a)   # answered: no more 200s
                    break
                await hang_up(peer, server, ok)
            assert held is not None
            drain = asyncio.create_task(a.drain(grace_s=30.0))
            await asyncio.sleep(2.5)                      # A's OPTIONS answer 503: inactive
            for n in range(4):
                server, ok = await _call(peer, proxy, f"after-{n}", (a, b))
                assert server is b, "a new call reached the draining server"
                await hang_up(peer, server, ok)
            assert any(c.startswith("held-") for c in a.live) and not drain.done()   # it goes on
            await hang_up(peer, a, held, ack=False)       # the caller ends it: the drain is over
            await asyncio.wait_for(drain, 10)
            log = log_path.read_text(errors="replace")
    finally:
        peer.close()
    assert "NO-DESTINATION" not in log
    records = {r.call_sid: r for r in a.store.list()}
    held_record = next(r for sid, r in records.items() if sid.startswith("held-"))
    assert held_record.end_reason == "caller hung up (BYE)"
