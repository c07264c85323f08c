"""A stand-in for the SageMaker runtime's bidirectional streams, over loopback, as AWS's own client
(``aws-sdk-sagemaker-runtime-http2`` on awscrt) sees it: HTTP/2 over TLS (ALPN ``h2``) on
``POST /endpoints/{name}/invocations-bidirectional-stream``, SigV4-signed, the request and the
response each an ``application/vnd.amazon.eventstream`` of ``PayloadPart`` events. Each stream is
relayed, as SageMaker's sidecar does, to a container's WebSocket
``/invocations-bidirectional-stream`` with the ``X-Amzn-SageMaker-Model-Invocation-Path`` header
(parley's real model server): UTF8 parts become text frames, BINARY parts binary frames.

Streams are spread over the ``upstreams`` in turn (the instances behind one endpoint).
``fail_stream_after`` parts, when set, ends the next stream with an ``InternalStreamFailure``
event (an instance lost mid-stream). Nothing here is parley's code: it is the outside party the
``sagemaker://`` tests need, written from the event-stream encoding and the operation's model.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import hmac
import json
import ssl
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import h2.config
import h2.connection
import h2.events
import h2.exceptions

from harness.aws.sagemaker_runtime import event_message

ACCOUNT = "123456789012"
ACCESS_KEY = "AKIDPARLEYTEST"
SECRET_KEY = "parley-test-secret"


# -- SigV4, as the runtime checks it: the request's seed signature, then each event's, chained -----
def _hmac(key: bytes, text: str | bytes) -> bytes:
    return hmac.new(key, text.encode() if isinstance(text, str) else text, hashlib.sha256).digest()


def _signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    key = _hmac(("AWS4" + secret).encode(), date)
    for part in (region, service, "aws4_request"):
        key = _hmac(key, part)
    return key


def seed_signature(headers: dict[str, str], secret: str) -> tuple[str, str, str] | None:
    """(expected signature, scope, amz date) of a SigV4 request, from its headers; None if unsigned."""
    auth = headers.get("authorization", "")
    if not auth.startswith("AWS4-HMAC-SHA256 "):
        return None
    fields = dict(p.strip().split("=", 1) for p in auth[len("AWS4-HMAC-SHA256 "):].split(","))
    scope = fields["Credential"].split("/", 1)[1]
    date, region, service, _ = scope.split("/")
    signed = fields["SignedHeaders"].split(";")
    values = {**headers, "host": headers.get(":authority", "")}
    path, _, query = headers.get(":path", "").partition("?")
    canonical = "\n".join(["POST", path, query,
                           "".join(f"{h}:{values.get(h, '').strip()}\n" for h in signed),
                           ";".join(signed), headers.get("x-amz-content-sha256", "")])
    amz_date = headers.get("x-amz-date", "")
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    return hmac.new(_signing_key(secret, date, region, service), to_sign.encode(), hashlib.sha256).hexdigest(), \
        scope, amz_date


def event_signature(prior: str, date_ms: int, payload: bytes, scope: str, secret: str) -> bytes:
    """The ``:chunk-signature`` an event carries: over its ``:date`` header and payload, chained to the
    signature before it."""
    stamp = dt.datetime.fromtimestamp(date_ms / 1000, dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    date_header = struct.pack("!B", 5) + b":date" + b"\x08" + struct.pack("!q", date_ms)
    to_sign = "\n".join(["AWS4-HMAC-SHA256-PAYLOAD", stamp, scope, prior,
                         hashlib.sha256(date_header).hexdigest(), hashlib.sha256(payload).hexdigest()])
    date, region, service, _ = scope.split("/")
    return hmac.new(_signing_key(secret, date, region, service), to_sign.encode(), hashlib.sha256).digest()


# -- event-stream decoding (the client's side is signed: each message wraps the event) -------------
def _read_headers(raw: bytes) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    i = 0
    while i < len(raw):
        n = raw[i]
        name = raw[i + 1:i + 1 + n].decode()
        i += 1 + n
        kind = raw[i]
        i += 1
        if kind in (0, 1):
            value: Any = kind == 0
        elif kind == 2:
            value, i = raw[i], i + 1
        elif kind == 3:
            value, i = struct.unpack("!h", raw[i:i + 2])[0], i + 2
        elif kind == 4:
            value, i = struct.unpack("!i", raw[i:i + 4])[0], i + 4
        elif kind in (5, 8):
            value, i = struct.unpack("!q", raw[i:i + 8])[0], i + 8
        elif kind in (6, 7):
            size = struct.unpack("!H", raw[i:i + 2])[0]
            value = raw[i + 2:i + 2 + size]
            value = value.decode() if kind == 7 else value
            i += 2 + size
        elif kind == 9:
            value, i = raw[i:i + 16], i + 16
        else:
            raise ValueError(f"event-stream header type {kind}")
        headers[name] = value
    return headers


def split_messages(buffer: bytearray) -> list[tuple[dict[str, Any], bytes]]:
    """Whole messages off the front of ``buffer`` (checked: lengths and both CRCs)."""
    out = []
    while len(buffer) >= 12:
        total, head_len = struct.unpack("!II", buffer[:8])
        if len(buffer) < total:
            break
        msg = bytes(buffer[:total])
        del buffer[:total]
        if struct.unpack("!I", msg[8:12])[0] != zlib.crc32(msg[:8]):
            raise ValueError("event-stream prelude CRC mismatch")
        if struct.unpack("!I", msg[-4:])[0] != zlib.crc32(msg[:-4]):
            raise ValueError("event-stream message CRC mismatch")
        out.append((_read_headers(msg[12:12 + head_len]), msg[12 + head_len:-4]))
    return out


def response_part(data: bytes, data_type: str) -> bytes:
    return event_message({":event-type": "PayloadPart", ":message-type": "event",
                          ":content-type": "application/octet-stream", "DataType": data_type,
                          "CompletionState": "COMPLETE"}, data)


def stream_failure(message: str) -> bytes:
    return event_message({":exception-type": "InternalStreamFailure", ":message-type": "exception",
                          ":content-type": "application/json"}, json.dumps({"Message": message}).encode())


# -- a self-signed certificate for 127.0.0.1 -------------------------------------------------------
def make_certificate(folder: Path) -> tuple[Path, Path]:
    """(cert.pem, key.pem) for ``localhost`` and ``127.0.0.1``; the cert is its own CA bundle."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "runtime.sagemaker stand-in")])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = folder / "runtime-cert.pem", folder / "runtime-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@dataclass
class StreamRecord:
    """What one stream asked for, for the tests to check."""
    endpoint: str
    headers: dict[str, str]
    upstream: str = ""
    parts_in: int = 0
    parts_out: int = 0
    signed_parts: int = 0
    bad_signatures: int = 0
    ended_by: str = ""


@dataclass
class BidiRuntime:
    """``endpoints``: the names that exist; streams go to ``upstreams`` (http://HOST:PORT) in turn."""
    endpoints: tuple[str, ...]
    upstreams: list[str]
    region: str = "us-east-1"
    fail_stream_after: int | None = None
    streams: list[StreamRecord] = field(default_factory=list)
    _turn: int = 0
    _server: asyncio.Server | None = None
    port: int = 0

    async def start(self, cert: Path, key: Path) -> int:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(cert, key)
        ctx.set_alpn_protocols(["h2"])
        self._server = await asyncio.start_server(self._connection, "127.0.0.1", 0, ssl=ctx)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
        conn.initiate_connection()
        link = _Link(conn, writer)
        link.flush()
        relays: dict[int, _Relay] = {}
        try:
            while data := await reader.read(65536):
                try:
                    events = conn.receive_data(data)
                except h2.exceptions.ProtocolError:
                    break
                for event in events:
                    if isinstance(event, h2.events.RequestReceived):
                        relay = _Relay(self, link, event.stream_id, dict(event.headers))
                        relays[event.stream_id] = relay
                        relay.task = asyncio.create_task(relay.run())
                    elif isinstance(event, h2.events.DataReceived):
                        conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                        if (r := relays.get(event.stream_id)) is not None:
                            r.feed(event.data)
                    elif isinstance(event, h2.events.StreamEnded):
                        if (r := relays.get(event.stream_id)) is not None:
                            r.inbox.put_nowait(None)
                    elif isinstance(event, h2.events.StreamReset):
                        if (r := relays.pop(event.stream_id, None)) is not None:
                            r.record.ended_by = r.record.ended_by or "client reset"
                            r.inbox.put_nowait(None)
                    elif isinstance(event, h2.events.WindowUpdated):
                        link.window.set()
                    elif isinstance(event, h2.events.ConnectionTerminated):
                        return
                link.flush()
        except (ConnectionError, ssl.SSLError, asyncio.CancelledError):
            pass
        finally:
            for r in relays.values():
                r.inbox.put_nowait(None)
            writer.close()

    def pick_upstream(self) -> str:
        url = self.upstreams[self._turn % len(self.upstreams)]
        self._turn += 1
        return url


class _Link:
    def __init__(self, conn: h2.connection.H2Connection, writer: asyncio.StreamWriter) -> None:
        self.conn = conn
        self.writer = writer
        self.window = asyncio.Event()

    def flush(self) -> None:
        if out := self.conn.data_to_send():
            self.writer.write(out)

    async def send(self, stream_id: int, data: bytes) -> None:
        while data:
            room = min(self.conn.local_flow_control_window(stream_id), self.conn.max_outbound_frame_size)
            if room <= 0:
                self.window.clear()
                await self.window.wait()
                continue
            self.conn.send_data(stream_id, data[:room])
            data = data[room:]
            self.flush()
        await self.writer.drain()


class _Relay:
    def __init__(self, runtime: BidiRuntime, link: _Link, stream_id: int, headers: dict[str, str]) -> None:
        self.runtime = runtime
        self.link = link
        self.sid = stream_id
        self.headers = headers
        self.buffer = bytearray()
        self.prior_signature = ""
        self.scope = ""
        self.inbox: asyncio.Queue[tuple[str, bytes] | None] = asyncio.Queue()
        self.task: asyncio.Task[None] | None = None
        path = headers.get(":path", "").partition("?")[0]
        parts = path.split("/")
        endpoint = parts[2] if len(parts) == 4 and parts[1] == "endpoints" else ""
        self.record = StreamRecord(endpoint=endpoint, headers={k: v for k, v in headers.items()})
        runtime.streams.append(self.record)
        self.auth_problem = self._auth_problem()   # before any event: they are chained to its signature

    def feed(self, data: bytes) -> None:
        self.buffer += data
        for outer, payload in split_messages(self.buffer):
            expected = event_signature(self.prior_signature, int(outer.get(":date", 0)), payload, self.scope,
                                       SECRET_KEY) if self.scope else b""
            if outer.get(":chunk-signature") == expected:
                self.record.signed_parts += 1
            else:
                self.record.bad_signatures += 1
            self.prior_signature = bytes(outer.get(":chunk-signature", b"")).hex()
            if not payload:            # the signed empty message: the end of the client's stream
                continue
            for inner, body in split_messages(bytearray(payload)):
                if inner.get(":event-type") == "PayloadPart":
                    self.record.parts_in += 1
                    self.inbox.put_nowait((str(inner.get("DataType", "BINARY")), body))

    def _refuse(self, status: int, kind: str, message: str) -> None:
        body = json.dumps({"message": message}).encode()
        self.link.conn.send_headers(self.sid, [(":status", str(status)), ("content-type", "application/json"),
                                               ("x-amzn-errortype", kind),
                                               ("content-length", str(len(body)))])
        self.link.conn.send_data(self.sid, body, end_stream=True)
        self.link.flush()
        self.record.ended_by = kind

    def _auth_problem(self) -> str | None:
        seed = seed_signature(self.headers, SECRET_KEY)
        if seed is None:
            return "the request is not signed with SigV4"
        expected, scope, _ = seed
        key_id = self.headers["authorization"].split("Credential=", 1)[1].split("/", 1)[0]
        if key_id != ACCESS_KEY:
            return f"unknown access key {key_id}"
        if scope.split("/")[1:3] != [self.runtime.region, "sagemaker"]:
            return f"credential scope {scope} is not {self.runtime.region}/sagemaker"
        if not self.headers["authorization"].endswith(f"Signature={expected}"):
            return "the request signature does not match"
        self.scope, self.prior_signature = scope, expected
        return None

    async def run(self) -> None:
        if self.headers.get(":method") != "POST" or not self.record.endpoint \
                or not self.headers.get(":path", "").partition("?")[0].endswith("/invocations-bidirectional-stream"):
            self._refuse(404, "UnknownOperationException", "unknown operation")
            return
        if self.auth_problem is not None:
            self._refuse(403, "InvalidSignatureException", self.auth_problem)
            return
        if self.record.endpoint not in self.runtime.endpoints:
            self._refuse(400, "ValidationError",
                         f"Endpoint {self.record.endpoint} of account {ACCOUNT} not found.")
            return
        upstream = self.runtime.pick_upstream()
        self.record.upstream = upstream
        fail_after = self.runtime.fail_stream_after
        self.runtime.fail_stream_after = None
        target = self.headers.get("x-amzn-sagemaker-model-invocation-path", "")
        query = self.headers.get("x-amzn-sagemaker-model-query-string", "")
        url = f"{upstream.replace('http', 'ws', 1)}/invocations-bidirectional-stream" + (f"?{query}" if query else "")
        async with aiohttp.ClientSession() as session:
            try:
                ws = await session.ws_connect(url, headers={"X-Amzn-SageMaker-Model-Invocation-Path": target})
            except aiohttp.WSServerHandshakeError as exc:
                self._refuse(424, "ModelError", f"the model container refused the stream: {exc.status}")
                return
            self.link.conn.send_headers(self.sid, [(":status", "200"),
                                                   ("content-type", "application/vnd.amazon.eventstream"),
                                                   ("x-amzn-invoked-production-variant", "AllTraffic")])
            self.link.flush()
            pump = asyncio.create_task(self._pump_in(ws))
            try:
                async for msg in ws:
                    if msg.type == aiohttp.WSMsgType.TEXT:
                        part = response_part(msg.data.encode(), "UTF8")
                    elif msg.type == aiohttp.WSMsgType.BINARY:
                        part = response_part(msg.data, "BINARY")
                    else:
                        break
                    if fail_after is not None and self.record.parts_out >= fail_after:
                        await self.link.send(self.sid, stream_failure("the instance stopped"))
                        self.record.ended_by = "InternalStreamFailure"
                        break
                    await self.link.send(self.sid, part)
                    self.record.parts_out += 1
                self.record.ended_by = self.record.ended_by or "model closed"
                self.link.conn.end_stream(self.sid)
                self.link.flush()
            except (h2.exceptions.StreamClosedError, ConnectionError):
                self.record.ended_by = self.record.ended_by or "client gone"
            finally:
                pump.cancel()
                await ws.close()

    async def _pump_in(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        while (item := await self.inbox.get()) is not None:
            kind, body = item
            if kind == "UTF8":
                await ws.send_str(body.decode())
            else:
                await ws.send_bytes(body)
        self.record.ended_by = self.record.ended_by or "client ended input"
        await ws.close()
