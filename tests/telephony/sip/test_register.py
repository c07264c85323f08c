"""parley registers at a PBX (sipp playing the registrar) and answers its digest challenge."""

from __future__ import annotations

import asyncio

from telephony.sip import RegistrationConfig

from .conftest import SCENARIOS, free_udp_port, wait_for


async def _registrar(port: int):
    return await asyncio.create_subprocess_exec(
        "sipp", "-sf", str(SCENARIOS / "registrar.xml"), "-i", "127.0.0.1", "-p", str(port), "-m", "1",
        "-nostdin", "-timeout", "15s", "-timeout_error",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


async def _finish(proc) -> tuple[int, str]:
    async with asyncio.timeout(10):
        out, err = await proc.communicate()
    return proc.returncode, (out + err).decode(errors="replace")[-2000:]


async def test_register_answers_the_challenge_and_unregisters(make_sip_server):
    port = free_udp_port()
    proc = await _registrar(port)
    await asyncio.sleep(0.3)  # let sipp bind
    server = await make_sip_server(registration=RegistrationConfig(
        registrar_host="127.0.0.1", registrar_port=port, username="parley", password="pbx-pw", expires_s=120))
    await wait_for(lambda: server.registration.registered, timeout_s=5)
    assert server.registration.expires_s == 120
    await server.stop()  # unregisters (Expires: 0)
    rc, output = await _finish(proc)
    assert rc == 0, output


async def test_register_with_a_wrong_password_fails(make_sip_server):
    port = free_udp_port()
    proc = await _registrar(port)
    await asyncio.sleep(0.3)
    server = await make_sip_server(registration=RegistrationConfig(
        registrar_host="127.0.0.1", registrar_port=port, username="parley", password="nope", expires_s=120))
    await wait_for(lambda: server.registration.last_error is not None, timeout_s=5)
    assert not server.registration.registered
    assert "403" in server.registration.last_error
    proc.kill()
    await proc.wait()
