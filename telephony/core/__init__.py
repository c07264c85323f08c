"""The call core: what every transport's calls share, so an edge writes only connect, media, close.

    from telephony.core import CallSupervisor, PlayoutOutput, drain_calls, keypad_frame

:class:`CallSupervisor` owns one call's life (agent, pipeline, runner, the one catch-all, the
record, hang-up, the drain's polite end); :class:`PlayoutOutput` is the output transport's
barge-in and playout tracking in one order; :func:`drain_calls` is SIGTERM's drain over any
transport's live calls; :func:`keypad_frame` maps a pressed key to pipecat's frame.
"""

from telephony.core.output import PlayoutOutput, keypad_frame
from telephony.core.supervisor import SHUTDOWN_REASON, CallSupervisor, drain_calls

__all__ = ["SHUTDOWN_REASON", "CallSupervisor", "PlayoutOutput", "drain_calls", "keypad_frame"]
