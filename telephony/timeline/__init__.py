"""The call pages served beside the call server: every call, and one call on a time axis."""

from telephony.timeline.access import PageAccess, page_access
from telephony.timeline.routes import CallPages

__all__ = ["CallPages", "PageAccess", "page_access"]
