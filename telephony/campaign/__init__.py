"""Outbound campaigns: a contacts file dialled within windows, caps and retries, its state in the
call store so a killed runner resumes without calling anyone twice.

Public API::

    from telephony.campaign import (CampaignConfig, CampaignRunner, CallingWindow, RetryPolicy, ServerPlacer,
                                    campaign_results, load_dnc, open_campaign, read_contacts)
"""

from telephony.campaign.book import open_campaign, valid_name
from telephony.campaign.config import CampaignConfig
from telephony.campaign.contacts import Contact, load_dnc, parse_contacts, read_contacts
from telephony.campaign.placer import ServerPlacer
from telephony.campaign.results import campaign_results, write_csv, write_json
from telephony.campaign.runner import CampaignRunner, Progress
from telephony.campaign.schedule import CallingWindow, RetryPolicy

__all__ = ["CallingWindow", "CampaignConfig", "CampaignRunner", "Contact", "Progress", "RetryPolicy", "ServerPlacer",
           "campaign_results", "load_dnc", "open_campaign", "parse_contacts", "read_contacts", "valid_name",
           "write_csv", "write_json"]
