"""Writing a campaign into the call store, or finding the one a resumed run continues.

    row, created = open_campaign(store, "spring", contacts, config, source="contacts.csv")

A name is a campaign: the same name with the same contacts is that campaign again (a run killed or
stopped goes on where it was, its settings as first given); the same name with other contacts is
refused, so a second file never mixes into the first one's results.
"""

from __future__ import annotations

import re
import time
from typing import Final

from pipeline.campaigns import CampaignRow, CampaignStore, ContactRow
from telephony.campaign.config import CampaignConfig
from telephony.campaign.contacts import Contact
from telephony.errors import CampaignError

__all__ = ["open_campaign", "valid_name"]

NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")


def valid_name(name: str) -> str:
    if not NAME.fullmatch(name):
        raise CampaignError(f"campaign name {name[:70]!r}: 1-64 letters, digits, '_', '.' or '-'")
    return name


def open_campaign(store: CampaignStore, name: str, contacts: list[Contact], config: CampaignConfig, *,
                  source: str = "") -> tuple[CampaignRow, bool]:
    """The campaign ``name``: made from ``contacts`` (True), or the one already there (False)."""
    valid_name(name)
    rows = [ContactRow(name, c.key, c.line, c.target, c.timezone, dict(c.params)) for c in contacts]
    row = CampaignRow(name, time.time(), config.to_dict(), source)
    if store.campaign_create(row, rows):
        return row, True
    existing = store.campaign_get(name)
    if existing is None:   # removed between the two statements
        raise CampaignError(f"campaign {name!r}: could not be written; try again")
    theirs = {c.key for c in store.campaign_contacts(name)}
    if theirs != {r.key for r in rows}:
        raise CampaignError(f"campaign {name!r} exists with other contacts ({len(theirs)}): give another name "
                            "(--name), or resume it as it is")
    return existing, False
