"""How long a lease or a leadership may be believed, by this process's own clock, and the
sentences said when it may not any more; ``Belief``, what every kind of held thing knows of
itself (a lease, a leadership, a session's leases), threaded or asyncio: its names and their
fencing tokens, and the ceiling ``max_hold`` puts on its validity.
"""

from __future__ import annotations

import math
import random
from typing import Any, Dict, Optional, Sequence, Tuple

from .lost import LostReason

SILENT = "no renewal confirmed before the lease ran out (server silent)"
LEADER_SILENT = "no renewal confirmed before the leadership ran out (server silent)"
#: An `acquired` or `elected` that arrives after the validity it gives has run out (held up on
#: its way, as by a partition that healed): the lease may be someone else's by now, another may
#: lead.
LATE_ACQUIRED = "acquired, but the news arrived after its validity had run out"
LATE_ELECTED = "elected, but the news arrived after the leadership's validity had run out"
#: A lease past its ``max_hold`` by this process's count (from when its acquire was sent): over,
#: whatever the server last vouched, and never resumed.
MAX_HOLD_REACHED = "reached its max_hold (counted from when the acquire was sent)"
#: An ``acquired`` that arrives after the ``max_hold`` counted from the acquire's sending (the
#: wait counts against it: the client cannot tell when the server took the names).
LATE_FOR_MAX_HOLD = "acquired after its max_hold had run out (the wait counts against it)"

#: Pauses between attempts to resume: from the first, doubling up to the last, with jitter.
FIRST_PAUSE, LAST_PAUSE = 0.02, 0.5


def vouched_until(opened: float, received: float, vouch: Any) -> float:
    """Until when ``vouch`` (an ``acquired``, ``extended`` or ``elected``) vouches for a lease
    or a leadership, by the clock of ``opened`` and ``received``: ``valid_for_ms`` from its
    receipt, and never past ``valid_to_ms`` after ``opened``, when the client opened the stream
    (the server counts it from when the stream reached it, which is later). That bound still
    holds when the message was held up on its way: a healed partition delivers old messages
    late, and one read as fresh would keep its client believing past the key. ``valid_to_ms``
    0: a server that predates it, only the receipt counts. A result not after ``received``:
    the news came too late to be believed at all."""
    from_receipt = received + vouch.valid_for_ms / 1000
    if not vouch.valid_to_ms:
        return from_receipt
    return min(from_receipt, opened + vouch.valid_to_ms / 1000)


def fences_of(names: Sequence[str], fencing_token: int, answer: Any) -> Optional[Dict[str, int]]:
    """Each name's fencing token, in the order asked, from an answer's ``fences`` (an answer
    without them, from a server that predates them, covers its one name with ``fencing_token``);
    None when the answer does not cover exactly the names asked: a server that ignores
    ``more_names`` took the first name alone, and that is not the lease asked for."""
    given = {fence.name: fence.fencing_token for fence in getattr(answer, "fences", ())}
    if not given and len(names) == 1:
        given = {names[0]: fencing_token}
    if len(given) != len(names) or set(given) != set(names):
        return None
    return {name: given[name] for name in names}


def not_every_name(names: Sequence[str]) -> str:
    return (f"the server did not answer for every name asked ({', '.join(names)}): "
            "it may predate several names at once")


def other_lease(token: str, fencing_token: int, answer: Any) -> Optional[str]:
    """Why a resume's ``acquired`` is not the lease of ``token`` and ``fencing_token``, or None
    if it is: a resumed lease is the same lease or none."""
    if answer.token != token or answer.fencing_token != fencing_token:
        return f"resumed with fencing token {answer.fencing_token} instead of {fencing_token}"
    return None


def other_leadership(term: Optional[int], answer: Any) -> Optional[str]:
    """Why a resume's ``elected`` is not the leadership of ``term``, or None if it is."""
    if answer.term != term:
        return f"resumed with term {answer.term} instead of {term}"
    return None


def too_late(what: str, error: str) -> str:
    return f"could not resume before the {what}'s validity ran out: {error}"


def pause(delay: float, until: float, now: float) -> float:
    """A jittered pause of about ``delay``, not past ``until``."""
    return max(0.0, min(random.uniform(delay / 2, delay), until - now))


class Belief:
    """What every held thing knows of itself, held on its own stream (``held.Held``) or on a
    session's (``session_core.Member``): its names, token and fencing tokens, until when it may
    be believed (never past its ``max_hold``), how often it was resumed, and whether it is lost
    (``lost``, an event of its driver's model). ``take`` and ``retake`` are the one rule for a
    first answer and a resume's: news that came too late is no lease, an answer that does not
    cover every name asked is none either, and a resumed lease is the same lease."""

    #: Why an answer that came too late is refused.
    late = LATE_ACQUIRED

    def __init__(self, lost: Any, names: Sequence[str], max_hold: float = 0.0):
        #: Every name it holds, the first (``name``) first, as asked.
        self.names = tuple(names)
        self.token = ""
        #: The first name's fencing token (a leadership's term).
        self.fencing_token = 0
        #: Each name's fencing token, in the order of ``names``.
        self.fences: Dict[str, int] = {}
        #: The ceiling on the hold, in seconds (0: none), and when it falls by the driver's
        #: clock (``acquire_sent`` sets it): the validity never reaches past it.
        self.max_hold = max_hold
        self.ceiling = math.inf
        #: When the validity last confirmed runs out (the driver's clock).
        self.valid_until = 0.0
        #: How many times it was taken back on a new stream after a break.
        self.resumes = 0
        self.lost = lost
        #: Why it was lost, for programs (None until it is).
        self.lost_code: Optional[LostReason] = None
        self.was_held = False
        #: Held, asked again with its token on a new stream, not answered yet.
        self.resuming = False

    def acquire_sent(self, at: float) -> None:
        """Its acquire was sent at ``at`` (the driver's clock): the ceiling counts from then,
        which is no later than when the server took the names."""
        if self.max_hold:
            self.ceiling = at + self.max_hold

    def believe_until(self, valid_until: float) -> None:
        """Believed until ``valid_until`` (a renewal's vouch), never past the ceiling."""
        self.valid_until = min(valid_until, self.ceiling)

    def ran_out(self, what: str, last_error: str,
                silent: str) -> Tuple[str, Optional[LostReason]]:
        """Why it is over now that its validity ran out by this process's clock, and the code
        to say so with (None: read from the failure, as for any lost lease): its ceiling, too
        late to resume, or a server that went silent."""
        if self.valid_until >= self.ceiling:
            return MAX_HOLD_REACHED, LostReason.MAX_HOLD
        return (too_late(what, last_error) if self.resuming else silent), None

    def number(self, answer: Any) -> int:
        """The fencing token an answer gives (a leadership's is its term)."""
        return answer.fencing_token

    def other(self, answer: Any) -> Optional[str]:
        """Why a resume's answer is not what it held, or None if it is."""
        return other_lease(self.token, self.fencing_token, answer)

    def take(self, answer: Any, valid_until: float, received: float) -> Optional[str]:
        """Takes a first ``acquired`` or ``elected`` (received at ``received``, vouching until
        ``valid_until``): why it cannot be believed (it came too late, or does not cover every
        name asked), or None once held."""
        fences = fences_of(self.names, self.number(answer), answer)
        if fences is None:
            return not_every_name(self.names)
        if self.ceiling <= received:
            return LATE_FOR_MAX_HOLD
        if valid_until <= received:
            return self.late
        self.token, self.fencing_token = answer.token, self.number(answer)
        self.fences = fences
        self.believe_until(valid_until)
        return None

    def retake(self, answer: Any, valid_until: float, received: float) -> Optional[str]:
        """Takes a resume's answer: why it is not this lease any more (another, or news that
        came too late), or None once held again."""
        mismatch = self.other(answer)
        if mismatch is None and fences_of(self.names, self.number(answer),
                                          answer) != self.fences:
            mismatch = "resumed with other fencing tokens for its names"
        if mismatch is None and min(valid_until, self.ceiling) <= received:
            mismatch = f"could not resume: {self.late}"
        if mismatch is None:
            self.resuming = False
            self.resumes += 1
            self.believe_until(valid_until)
        return mismatch
