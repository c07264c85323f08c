"""Real SIP calls placed by sipp on loopback at a real SipServer, pipeline and engines."""

from __future__ import annotations

import asyncio

from telephony.sip import CallState

from .conftest import kamailio_proxy, run_sipp, wait_for


async def test_uac_pcap_call_is_answered_heard_and_hung_up(sip_server, seen, tmp_path):
    """sipp's g711a.pcap and a key, then 4 s of listening before the BYE (sipp's built-in
    uac_pcap hung up 1 s after the key, before the answer: flaky, see the scenario)."""
    result = await run_sipp(sip_server, tmp_path, scenario="uac_pcap_listen.xml")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    await wait_for(lambda: not sip_server.live)
    [record] = sip_server.store.list()
    assert record.transport == "sip" and record.ended
    assert record.end_reason == "caller hung up (BYE)"
    assert seen.dtmf == ["1"]
    assert seen.speech_starts >= 1
    [call] = sip_server.recent
    assert call.history == ["ringing", "answered", "acked", "bye-received", "ended"]
    stats = call.stats
    assert stats.packets_in == 236, stats  # g711a.pcap: 7 s of A-law in 30 ms packets, all of them
    assert stats.bad_packets == 0 and stats.dtmf_in == ["1"]
    assert stats.packets_out > 0  # the agent answered what it heard, over RTP
    assert sip_server.metrics.calls == {"sip": 1} and sip_server.metrics.live == {"sip": 0}
    assert seen.transcripts and any(seen.transcripts)  # the recogniser heard words in the pcap
    # the turn's words begin with the first final (a held turn joins the next one to it)
    assert record.turns and record.turns[0].user_text.startswith(seen.transcripts[0])
    assert record.stats["rtp_in"] == 236 and record.stats["dtmf_in"] == 1


async def test_digest_auth_good_credentials_answer_the_call(make_sip_server, seen, tmp_path):
    server = await make_sip_server(credentials=(("alice", "s3cret"),))
    result = await run_sipp(server, tmp_path, scenario="auth_good.xml", extra=("-au", "alice", "-ap", "s3cret"))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    await wait_for(lambda: not server.live)
    assert server.refused == {401: 1}
    [call] = server.recent
    assert call.history == ["ringing", "answered", "acked", "bye-received", "ended"]
    assert seen.dtmf == ["5"]


async def test_digest_auth_bad_credentials_never_reach_the_pipeline(make_sip_server, seen, tmp_path):
    server = await make_sip_server(credentials=(("alice", "s3cret"),))
    result = await run_sipp(server, tmp_path, scenario="auth_bad.xml", extra=("-au", "alice", "-ap", "wrong"))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert server.refused == {401: 2}
    assert server.metrics.refused == {"sip-unauthorized": 2}
    assert seen.agents == 0 and not server.store.list() and not server.recent


async def test_cancel_while_ringing(make_sip_server, seen, tmp_path):
    server = await make_sip_server(ring_s=3.0)
    result = await run_sipp(server, tmp_path, scenario="cancel.xml")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    await wait_for(lambda: not server.live)
    [call] = server.recent
    assert call.history == ["ringing", "cancelled", "ended"]
    assert call.record.end_reason == "caller cancelled"
    assert seen.agents == 0  # never answered: no pipeline was built
    assert server.refused == {487: 1}


async def test_the_agent_hangs_up_with_bye(sip_server, seen, tmp_path):
    result = await run_sipp(sip_server, tmp_path, scenario="agent_hangs_up.xml")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    await wait_for(lambda: not sip_server.live)
    [call] = sip_server.recent
    assert call.history == ["ringing", "answered", "acked", "bye-sent", "ended"]
    assert call.record.end_reason == "agent ended the call"
    assert seen.dtmf == ["#"]


async def test_transfer_frame_becomes_refer_then_bye(sip_server, seen, tmp_path):
    result = await run_sipp(sip_server, tmp_path, scenario="refer.xml")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    await wait_for(lambda: not sip_server.live)
    [call] = sip_server.recent
    assert call.history == ["ringing", "answered", "acked", "refer-sent", "transferred", "bye-sent", "ended"]
    assert call.record.end_reason == "transferred to sip:human@example.com"
    assert call.record.errors == []


async def test_reinvite_puts_the_call_on_hold_and_back(sip_server, tmp_path):
    result = await run_sipp(sip_server, tmp_path, scenario="hold.xml")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    await wait_for(lambda: not sip_server.live)
    [call] = sip_server.recent
    assert call.history == ["ringing", "answered", "acked", "hold", "acked", "resumed", "acked",
                            "bye-received", "ended"]


async def test_options_keepalive(sip_server, tmp_path):
    result = await run_sipp(sip_server, tmp_path, scenario="options.xml")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]


async def test_source_outside_the_allow_list_gets_403(make_sip_server, seen, tmp_path):
    server = await make_sip_server(allowed_networks=("10.0.0.0/8",))
    result = await run_sipp(server, tmp_path, scenario="refused.xml")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert server.refused == {403: 1} and seen.agents == 0


async def test_draining_server_refuses_new_invites_with_503(sip_server, seen, tmp_path):
    sip_server.draining = True
    result = await run_sipp(sip_server, tmp_path, scenario="refused.xml")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert sip_server.refused == {503: 1} and seen.agents == 0
    assert sip_server.metrics.refused == {"draining": 1}


async def test_drain_refuses_new_calls_and_ends_live_ones_with_a_farewell(sip_server, seen, tmp_path):
    call = asyncio.create_task(run_sipp(sip_server, tmp_path / "a", scenario="wait_for_bye.xml"))
    await wait_for(lambda: any(c.state is CallState.ANSWERED for c in sip_server.live.values()))
    drain = asyncio.create_task(sip_server.drain(grace_s=0.5, farewell="We are closing now. Goodbye."))
    await asyncio.sleep(0.1)
    refused = await run_sipp(sip_server, tmp_path / "b", scenario="refused.xml")
    assert refused.returncode == 0 and sip_server.refused.get(503) == 1
    result = await call
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    await asyncio.wait_for(drain, 20)
    [ended] = sip_server.recent
    assert ended.history == ["ringing", "answered", "acked", "bye-sent", "ended"]
    assert ended.record.end_reason == "server shutting down"
    assert ended.record.greeting == "We are closing now Goodbye"  # the farewell played before the BYE
    assert ended.stats.packets_out > 50  # about 2 s of it


async def test_a_broken_agent_ends_its_call_with_bye_and_the_server_goes_on(make_sip_server, tmp_path, caplog):
    server = await make_sip_server(reraise_call_errors=False)

    def broken(_info):
        raise RuntimeError("agent exploded")

    server.agent_factory = broken
    result = await run_sipp(server, tmp_path / "a", scenario="wait_for_bye.xml")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    await wait_for(lambda: not server.live)
    [call] = server.recent
    # the BYE waits for the ACK (RFC 3261 15) even though the call broke at once
    assert call.history == ["ringing", "answered", "acked", "bye-sent", "ended"]
    assert call.record.errors == ["error: RuntimeError: agent exploded"]
    assert call.call_id in caplog.text and "agent exploded" in caplog.text  # logged with the call id
    result = await run_sipp(server, tmp_path / "b", scenario="options.xml")  # still serving
    assert result.returncode == 0


async def test_no_ack_for_the_200_ends_the_call(make_sip_server, tmp_path):
    server = await make_sip_server(no_ack_timeout_s=1.2)
    result = await run_sipp(server, tmp_path, scenario="no_ack.xml")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    await wait_for(lambda: not server.live)
    [call] = server.recent
    assert call.history == ["ringing", "answered", "bye-sent", "ended"]
    assert call.record.end_reason == "no ACK"


async def test_a_declined_transfer_keeps_the_call_up(sip_server, tmp_path):
    result = await run_sipp(sip_server, tmp_path, scenario="refer_declined.xml")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    await wait_for(lambda: not sip_server.live)
    [call] = sip_server.recent
    assert call.history == ["ringing", "answered", "acked", "refer-sent", "bye-received", "ended"]
    assert call.record.end_reason == "caller hung up (BYE)"
    assert call.record.errors == ["transfer to sip:human@example.com: REFER refused: 603 Decline"]


async def test_through_a_kamailio_proxy_our_bye_follows_its_record_route(sip_server, seen, tmp_path):
    """Regression: parley's BYE went straight to the caller's Contact, around the proxy that
    Record-Routed the call (a carrier's SBC bills and tracks calls by what passes through it)."""
    async with kamailio_proxy(sip_server.port, tmp_path / "kamailio") as proxy:
        result = await run_sipp(sip_server, tmp_path, scenario="agent_hangs_up.xml", via_port=proxy.port)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:] + proxy.log()[-2000:]
        await wait_for(lambda: not sip_server.live)
        log = proxy.log()
    [call] = sip_server.recent
    assert call.history == ["ringing", "answered", "acked", "bye-sent", "ended"]
    assert len(call.routes) == 1 and call.routes[0].startswith(f"<sip:127.0.0.1:{proxy.port};lr")
    assert "LOOSE-ROUTED BYE sip:sipp@127.0.0.1" in log  # the BYE went through the proxy


async def test_an_ended_call_leaves_no_pipeline_behind(sip_server, seen, tmp_path):
    """Regression (found by bench_soak, 2026-12-03): ``SipServer.recent`` kept its last 100 ended SipCalls
    whole, and with them their pipelines, ~1.2 MB a call: the server grew by that for every SIP
    call. What is kept now is a summary; once the call ends nothing holds the call itself."""
    import gc

    from pipecat.pipeline.pipeline import Pipeline

    from telephony.sip.call import SipCall

    result = await run_sipp(sip_server, tmp_path, scenario="uac_pcap_listen.xml")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    await wait_for(lambda: not sip_server.live)
    [ended] = sip_server.recent
    assert ended.record.end_reason == "caller hung up (BYE)" and ended.stats.packets_in > 0
    await asyncio.sleep(0.2)                      # the call's last tasks finish
    gc.collect()
    live = [o for o in gc.get_objects() if issubclass(type(o), (SipCall, Pipeline))]  # type(): no attribute reads
    assert live == [], live
