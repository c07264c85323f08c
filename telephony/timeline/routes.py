"""The call pages: every call, searchable, and one call on a time axis, with its recording.

    GET  /ui/calls                     the list page (search by date, number, outcome)
    GET  /ui/calls/{sid}               one call's page: both sides' words on a time axis, each
                                       turn's latency by stage, barge-ins, tool calls, transfers,
                                       the recording's waveform and a player
    GET  /ui/calls/{sid}/recording     the recording (Ogg/Opus or WAV; Range requests answered), from
                                       the recordings folder, or streamed from S3 (--recordings-s3)
    GET  /ui/api/calls?from=&to=&number=&outcome=&limit=    the list as JSON (telephony.timeline.search)
    GET  /ui/api/calls/{sid}           one call as JSON: the stored record, its outcome, the recording
    POST /ui/login                     the login form: the API token in, the page's cookie out
    GET  /ui/static/{name}             the pages' script and style sheet (no data)

Who may read them: :mod:`telephony.timeline.access`. The HTML is static: the script fetches the
JSON and writes every text from a record with ``textContent``, and every answer carries a
Content-Security-Policy that allows scripts from this server only. The records are read from the
store, as the store keeps them (masked by ``pipeline.redaction`` where the server masks): never
from a live call's unmasked record. A recording is served only from the server's recordings folder,
or from the S3 bucket and prefix it uploads to (streamed through this server: the pages' media-src is
this server alone, so no redirect to a presigned URL); any other s3:// URL is "kept elsewhere".
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from urllib.parse import quote

from aiohttp import web

from pipeline.audio.recordings import media_type
from pipeline.errors import PipelineError
from pipeline.records import CallRecord, CallStore
from pipeline.recordings_s3 import RecordingsS3Config
from telephony.core.uploads import RecordingUploader
from telephony.errors import RecordingUploadError
from telephony.log_limit import LogLimiter
from telephony.timeline.access import PageAccess
from telephony.timeline.search import SCAN_LIMIT, CallQuery, call_line, outcome
from telephony.timeline.waveform import peaks, too_long

__all__ = ["CallPages"]

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).resolve().parent.parent / "static" / "timeline"
STATIC_FILES = {"timeline.js": "text/javascript", "timeline.css": "text/css"}
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                               "media-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; "
                               "base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
S3_CHUNK_BYTES = 256 * 1024
OFF = ("the call pages are off: this server listens beyond this machine and has no API token "
       "(start parley serve with --api-token or PARLEY_API_TOKEN)\n")


def _json(data: object, status: int = 200, **headers: str) -> web.Response:
    return web.json_response(data, status=status, headers={**HEADERS, **headers})


class CallPages:
    """The ``/ui`` routes over ``store``; recordings served from under ``recordings_dir`` only."""

    def __init__(self, store: CallStore, access: PageAccess, *, recordings_dir: str | None = None,
                 recordings_s3: RecordingsS3Config | None = None, secure_cookie: bool = False):
        self.store = store
        self.access = access
        self.recordings_dir = Path(recordings_dir).resolve() if recordings_dir else None
        self.s3 = (RecordingUploader.shared(recordings_s3, recordings_dir)
                   if recordings_s3 is not None and recordings_dir else None)
        self.secure_cookie = secure_cookie
        self._log_limit = LogLimiter()

    def register(self, app: web.Application) -> None:
        app.add_routes([
            web.get("/ui/calls", self.list_page),
            web.get("/ui/calls/{sid}", self.call_page),
            web.get("/ui/calls/{sid}/recording", self.recording),
            web.get("/ui/api/calls", self.list_json),
            web.get("/ui/api/calls/{sid}", self.call_json),
            web.post("/ui/login", self.login),
            web.get("/ui/static/{name}", self.static),
        ])

    def log_mode(self, host: str) -> None:
        """Say at start who may read the pages."""
        if self.access.mode == "off":
            log.warning("call pages (/ui/calls) off: listening on %s with no API token; set --api-token or "
                        "PARLEY_API_TOKEN to open them", host or "every address")
        elif self.access.mode == "loopback":
            log.info("call pages at /ui/calls, open to this machine only (no API token set)")
        else:
            log.info("call pages at /ui/calls, behind the API token")

    # -- the gate ------------------------------------------------------------------------------

    def _refuse(self, request: web.Request, *, page: bool) -> web.StreamResponse:
        """The answer to a request without credentials (or off, or on a foreign Host)."""
        if self.access.mode == "off":
            raise web.HTTPNotFound(text=OFF, headers=HEADERS)
        if self._log_limit(f"ui:{request.remote}"):
            log.warning("refused %s %s from %s: %s (further refusals from it are logged once a minute)",
                        request.method, request.path, request.remote,
                        f"Host {request.host[:80]!r} is not this machine" if self.access.mode == "loopback"
                        else "no valid token or cookie")
        if self.access.mode == "loopback":
            raise web.HTTPForbidden(text="the call pages answer only at a loopback address (127.0.0.1, localhost)\n",
                                    headers=HEADERS)
        if page:
            return web.FileResponse(STATIC_DIR / "login.html", status=401,
                                    headers={**HEADERS, "WWW-Authenticate": "Bearer", "Content-Type": "text/html"})
        return _json({"error": "credentials needed: Authorization: Bearer TOKEN, or log in at /ui/calls"}, 401,
                     **{"WWW-Authenticate": "Bearer"})

    def _secure(self, request: web.Request) -> bool:
        return self.secure_cookie or request.secure

    async def _page(self, request: web.Request, name: str) -> web.StreamResponse:
        if request.query.get("token") is not None and self.access.mode == "token":
            if not self.access.token_ok(request.query["token"]):
                return self._refuse(request, page=True)
            # the token once in the address: trade it for the cookie, and take it out of the address
            rest = {k: v for k, v in request.query.items() if k != "token"}
            response = web.HTTPSeeOther(str(request.rel_url.with_query(rest)), headers=HEADERS)
            self.access.set_cookie(response, secure=self._secure(request))
            raise response
        if not self.access.allowed(request):
            return self._refuse(request, page=True)
        return web.FileResponse(STATIC_DIR / name, headers={**HEADERS, "Content-Type": "text/html"})

    # -- handlers ------------------------------------------------------------------------------

    async def list_page(self, request: web.Request) -> web.StreamResponse:
        return await self._page(request, "calls.html")

    async def call_page(self, request: web.Request) -> web.StreamResponse:
        return await self._page(request, "call.html")

    async def static(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        if self.access.mode == "off" or name not in STATIC_FILES:  # a fixed list: no path reaches the disk
            raise web.HTTPNotFound(text="no such file\n")
        return web.FileResponse(STATIC_DIR / name, headers={**HEADERS, "Cache-Control": "no-cache",
                                                            "Content-Type": STATIC_FILES[name]})

    async def login(self, request: web.Request) -> web.StreamResponse:
        if self.access.mode != "token":
            raise web.HTTPNotFound(text=OFF if self.access.mode == "off" else "no login here: no API token is set\n")
        form = await request.post()
        given, after = str(form.get("token", "")), str(form.get("next", ""))
        if not self.access.token_ok(given):
            return self._refuse(request, page=True)
        if not after.startswith("/ui/") or after.startswith("//") or "\\" in after:
            after = "/ui/calls"
        response = web.HTTPSeeOther(after, headers=HEADERS)
        self.access.set_cookie(response, secure=self._secure(request))
        raise response

    async def list_json(self, request: web.Request) -> web.StreamResponse:
        if not self.access.allowed(request):
            return self._refuse(request, page=False)
        try:
            query = CallQuery.parse(request.query)
        except ValueError as exc:
            return _json({"error": str(exc)}, 400)
        records = await self._read(self.store.list, SCAN_LIMIT)
        found = query.run(records)
        return _json({"calls": [call_line(r) for r in found], "searched": len(records),
                      "more": len(records) >= SCAN_LIMIT})

    async def call_json(self, request: web.Request) -> web.StreamResponse:
        if not self.access.allowed(request):
            return self._refuse(request, page=False)
        record = await self._record(request)
        data = record.to_dict()
        data["params"] = dict(record.params)
        data["outcome"] = outcome(record)
        data["recording"] = await self._recording_view(record)
        return _json(data)

    async def recording(self, request: web.Request) -> web.StreamResponse:
        if not self.access.allowed(request):
            return self._refuse(request, page=False)
        record = await self._record(request)
        if self._in_s3(record):
            return await self._stream_from_s3(request, record)
        path, why = self._recording_file(record)
        if path is None:
            raise web.HTTPNotFound(text=f"{why}\n", headers=HEADERS)
        try:  # whatever the file is, by its first bytes: audio/ogg or audio/wav
            kind = await asyncio.to_thread(media_type, path)
        except (OSError, PipelineError) as exc:
            log.warning("[%s] call page: cannot serve %s: %s", record.call_sid, path, exc)
            raise web.HTTPNotFound(text="the recording's file cannot be read\n", headers=HEADERS) from None
        return web.FileResponse(path, headers={**HEADERS, "Content-Type": kind})

    # -- reading -------------------------------------------------------------------------------

    async def _read(self, fn, *args):
        """A store read, off the event loop (a durable store reads a disk or a database)."""
        try:
            return await asyncio.to_thread(fn, *args)
        except PipelineError as exc:
            log.error("call pages: cannot read the call records: %s", exc)
            raise web.HTTPServiceUnavailable(text="the call records cannot be read now\n", headers=HEADERS) from None

    async def _record(self, request: web.Request) -> CallRecord:
        sid = request.match_info["sid"]
        record = await self._read(self.store.get, sid)
        if record is None:
            raise web.HTTPNotFound(text="no such call\n", headers=HEADERS)
        return record

    def _recording_file(self, record: CallRecord) -> tuple[Path | None, str]:
        """The recording's file, or None and why it is not served."""
        if not record.recording:
            return None, "this call was not recorded"
        if "://" in record.recording:
            return None, "the recording is kept elsewhere (not on this server)"
        if self.recordings_dir is None:
            return None, "this server keeps no recordings (--recordings)"
        path = Path(record.recording).resolve()
        if not path.is_relative_to(self.recordings_dir):
            return None, "the recording is outside this server's recordings folder"
        if not path.is_file():
            return None, "the recording's file is gone (deleted after its retention, or moved)"
        return path, ""

    def _in_s3(self, record: CallRecord) -> bool:
        """The recording is in the bucket and prefix this server uploads to (and may read)."""
        return self.s3 is not None and record.recording is not None and self.s3.holds(record.recording)

    async def _stream_from_s3(self, request: web.Request, record: CallRecord) -> web.StreamResponse:
        assert self.s3 is not None and record.recording is not None
        byte_range = request.headers.get("Range")
        try:
            got = await asyncio.to_thread(self.s3.read, record.recording, byte_range)
        except RecordingUploadError as exc:
            log.warning("[%s] call page: cannot read the recording: %s", record.call_sid, exc)
            raise web.HTTPNotFound(text="the recording cannot be read from S3\n", headers=HEADERS) from None
        body = got["Body"]
        headers = {**HEADERS, "Content-Type": got.get("ContentType") or "application/octet-stream",
                   "Accept-Ranges": "bytes", "Content-Length": str(got["ContentLength"])}
        if got.get("ContentRange"):
            headers["Content-Range"] = got["ContentRange"]
        response = web.StreamResponse(status=206 if got.get("ContentRange") else 200, headers=headers)
        try:
            await response.prepare(request)
            while chunk := await asyncio.to_thread(body.read, S3_CHUNK_BYTES):
                await response.write(chunk)
        finally:
            body.close()
        await response.write_eof()
        return response

    async def _recording_view(self, record: CallRecord) -> dict:
        view: dict = {"available": True, "url": f"/ui/calls/{quote(record.call_sid, safe='')}/recording",
                      "offset_s": record.marks_s.get("recording_start", 0.0), "waveform": None}
        if self._in_s3(record):  # no waveform: that would read the whole object for the page
            return view
        path, why = self._recording_file(record)
        if path is None:
            return {"available": False, "why": why}
        try:
            if not await asyncio.to_thread(too_long, path):
                view["waveform"] = await asyncio.to_thread(peaks, path)
        except (OSError, PipelineError) as exc:
            log.warning("[%s] call page: no waveform for %s: %s", record.call_sid, path, exc)
        return view
