"""Things a phone agent says, as an LLM would write them (digits, $, %, dates, abbreviations):
the text of the teacher data set.

    gen = AgentSentences(seed=1)
    gen.sentence()   # e.g. "I have your order number as 44172291. Is that right?"

Seeded and deterministic. Sentences are written, not normalised: the front end's normaliser
turns them into words, so the data exercises it the way live LLM text will.
"""

from __future__ import annotations

import random

__all__ = ["AgentSentences"]

_FIRST = ("James Mary Robert Patricia John Jennifer Michael Linda David Elizabeth William Susan "
          "Maria Carlos Aisha Priya Omar Sofia Liam Emma Noah Olivia Ethan Ava Lucas Mia Grace "
          "Daniel Sarah Kevin Laura Brian Nancy Steven Karen Jason Lisa Ryan Anna Peter Helen "
          "Thomas Rachel Mark Julia Paul Diana Eric Nina Oscar Rosa Victor Irene").split()
_LAST = ("Smith Johnson Williams Brown Jones Garcia Miller Davis Rodriguez Martinez Hernandez "
         "Lopez Gonzalez Wilson Anderson Thomas Taylor Moore Jackson Martin Lee Perez Thompson "
         "White Harris Clark Lewis Walker Young Allen King Wright Scott Green Baker Adams Nelson "
         "Hill Campbell Mitchell Roberts Carter Phillips Evans Turner Parker Collins Edwards "
         "Stewart Morris Murphy Cook Rogers Morgan Cooper Peterson Reed Bailey Bell Kelly").split()
_STREETS = ("Main Oak Pine Maple Cedar Elm Washington Lake Hill Park River Sunset Church Market "
            "Spring Highland Mill Center Forest Franklin Madison Jefferson Lincoln Walnut").split()
_STREET_KINDS = ("Street", "St.", "Avenue", "Ave.", "Road", "Rd.", "Drive", "Lane", "Boulevard",
                 "Court", "Way", "Place")
_CITIES = ("Springfield Portland Austin Denver Boston Chicago Seattle Phoenix Dallas Atlanta Miami "
           "Houston Detroit Nashville Memphis Columbus Baltimore Milwaukee Oakland Tucson "
           "Sacramento Richmond Omaha Raleigh").split()
_MONTHS = ("January February March April May June July August September October November "
           "December").split()
_DAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
_ITEMS = ("order", "package", "refund", "invoice", "payment", "subscription", "appointment",
          "reservation", "ticket", "delivery", "bill", "account", "card", "claim", "prescription",
          "booking", "return", "policy")
_BUSINESS = ("Acme Shop", "Riverside Dental", "City Bank", "Blue Sky Travel", "Green Valley Clinic",
             "Northwind Traders", "Summit Insurance", "Harbor Hotel", "Metro Energy",
             "Bright Home Services")
_DEPTS = ("billing", "customer service", "technical support", "the pharmacy", "sales",
          "the front desk", "our claims team", "a supervisor", "the returns department")
_STATUS = ("has shipped", "is out for delivery", "was delivered yesterday", "is being prepared",
           "is on hold", "has been cancelled", "is waiting for payment", "is in transit",
           "was returned to the sender", "will arrive tomorrow")

_TEMPLATES = (
    "Thank you for calling {business}. How can I help you today?",
    "Hi, this is {agent} from {business}. How may I help you?",
    "Good {daypart}! You've reached {business}.",
    "Thanks for calling, {first}. What can I do for you?",
    "Could I have your {item} number, please?",
    "Can you spell your last name for me?",
    "I have your name as {first} {last}, spelled {spelled}. Is that correct?",
    "Let me read that back: {phone}.",
    "Your {item} number is {order}.",
    "I have your order number as {order}. Is that right?",
    "Order #{short} {status}.",
    "Your {item} {status}.",
    "Your account number ends in {four}.",
    "The confirmation code is {code}.",
    "Your reference number is {ref}.",
    "I can see a payment of {money} on {month} {day}.",
    "The total comes to {money}, including tax.",
    "You were charged {money} on {date}.",
    "Your balance is {money}. Would you like to pay it now?",
    "A refund of {money} will be issued within {small} to {small2} business days.",
    "Your appointment is on {weekday}, {month} {dayth} at {time}.",
    "We have an opening on {weekday} at {time}. Does that work for you?",
    "I've booked you for {date} at {time}.",
    "We're open {weekday} to {weekday2}, {hour} to {hour2}.",
    "Our office closes at {time} today.",
    "The delivery window is {time} to {time2}.",
    "Is {phone} still the best number to reach you?",
    "You can also call us at {tollfree}.",
    "Please send it to {first}.{last_low}@example.com.",
    "You can find it on our website, www.{site}.com.",
    "We're located at {house} {street} {kind}, {city}.",
    "Is your address still {house} {street} {kind}?",
    "Your zip code is {zip}, right?",
    "Your date of birth is {slashdate}?",
    "Your policy started on {isodate}.",
    "That's {pct}% off your next {item}.",
    "Interest is {rate}% per year.",
    "I'm sorry, I didn't catch that. Could you repeat it?",
    "I'm sorry for the wait, {first}.",
    "I apologize for the trouble with your {item}.",
    "I'm sorry, but I can't find an {item} with that number.",
    "Please hold while I check that for you.",
    "One moment, please.",
    "I'll transfer you to {dept} now.",
    "Let me connect you with {dept}. Please stay on the line.",
    "Your estimated wait time is {small} minutes.",
    "Is there anything else I can help you with?",
    "Thank you for calling {business}. Have a great day!",
    "Goodbye, and thanks for your patience.",
    "Would you like me to send a confirmation by text or email?",
    "Do you want to keep your {item}, or cancel it?",
    "Was the {item} for {first} {last}?",
    "Dr. {last} can see you on {weekday} at {time}.",
    "Mr. {last} will call you back before {time}.",
    "Ms. {last} asked us to reschedule your {item}.",
    "Your PIN is {four}; please don't share it.",
    "Your ID is {letters}-{short}.",
    "Press 1 for billing, 2 for support, or # to repeat.",
    "Your package weighs {small}.{digit} lbs.",
    "You have {count} points, worth {money}.",
    "We've had {count} calls about this since {year}.",
    "The {ordinal} payment is due on {month} {dayth}.",
    "Standard shipping takes {small} to {small2} business days.",
    "You can return any item within {days} days for a full refund.",
    "Your new plan costs ${plan} a month, starting {month} 1st.",
    "Yes, that's right.",
    "No problem at all.",
    "Sure, I can help with that.",
    "Okay, {first}, I've updated your {item}.",
    "Got it. Your {item} has been changed to {weekday}.",
    "Just to confirm, you'd like to cancel your {item}?",
    "Great, you're all set!",
    "Your flight {letters}{short} leaves at {time} from gate {gate}.",
    "Your room is {room}, on the {floorth} floor.",
    "The code expires in {small} minutes.",
    "We're closed on {weekday}s and public holidays.",
    "It's {temp} degrees and sunny in {city} today.",
    "Our return policy is simple: {days} days, no questions asked.",
    "If this is an emergency, please hang up and dial 911.",
    "Your order of {small} items ships from {city} on {weekday}.",
    "Can I get a phone number where we can reach you?",
    "Would {time} or {time2} be better for you?",
    "Is this {first} {last}?",
    "Your card ending in {four} was declined.",
    "That's {spelled_code}, correct?",
)


class AgentSentences:
    """Seeded generator of agent-side sentences (see module docstring)."""

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)

    def _digits(self, n: int) -> str:
        return "".join(str(self._rng.randint(0, 9)) for _ in range(n))

    def _time(self) -> str:
        r = self._rng
        h, m = r.randint(1, 12), r.choice((0, 0, 15, 30, 45, 5, 10, 20, 40, 50))
        style = r.random()
        ampm = r.choice(("am", "pm", "a.m.", "p.m.", "AM", "PM"))
        if style < 0.25 and m == 0:
            return f"{h}{ampm.replace('.', '').lower()}"
        if style < 0.4:
            return f"{h}:{m:02d}"
        return f"{h}:{m:02d} {ampm}"

    def _money(self) -> str:
        r = self._rng
        kind = r.random()
        if kind < 0.4:
            return f"${r.randint(1, 99)}.{r.randint(0, 99):02d}"
        if kind < 0.6:
            return f"${r.randint(1, 500)}"
        if kind < 0.75:
            return f"${r.randint(1, 9)},{r.randint(0, 999):03d}.{r.randint(0, 99):02d}"
        if kind < 0.85:
            return f"{r.choice('€£')}{r.randint(2, 300)}"
        return f"${r.randint(0, 0)}.{r.randint(1, 99):02d}"

    def _phone(self) -> str:
        a, b, c = self._digits(3), self._digits(3), self._digits(4)
        return self._rng.choice((f"({a}) {b}-{c}", f"{a}-{b}-{c}", f"{a} {b} {c}", a + b + c))

    def sentence(self) -> str:
        r = self._rng
        first, last = r.choice(_FIRST), r.choice(_LAST)
        month = r.randint(1, 12)
        day = r.randint(1, 28)
        fields = {
            "business": r.choice(_BUSINESS), "agent": r.choice(_FIRST), "first": first,
            "last": last, "last_low": last.lower(),
            "daypart": r.choice(("morning", "afternoon", "evening")),
            "item": r.choice(_ITEMS), "status": r.choice(_STATUS), "dept": r.choice(_DEPTS),
            "spelled": "-".join(last.upper()) if r.random() < 0.7 else " ".join(last.upper()),
            "phone": self._phone(), "order": self._digits(r.randint(6, 10)),
            "short": self._digits(r.randint(2, 4)), "four": self._digits(4),
            "code": r.choice((self._digits(6), "".join(r.choice("ABCDEFGHJKLMNPRSTUVWXYZ")
                                                          for _ in range(2)) + self._digits(4))),
            "ref": r.choice(("REF-", "CS-", "")) + self._digits(r.randint(5, 8)),
            "money": self._money(), "month": _MONTHS[month - 1], "day": day,
            "dayth": f"{day}" + ("th" if 10 <= day % 100 <= 20 else
                                 {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")),
            "date": r.choice((f"{_MONTHS[month - 1]} {day}", f"{month}/{day}")),
            "slashdate": f"{month}/{day}/{r.randint(1940, 2005)}",
            "isodate": f"{r.randint(2015, 2025)}-{month:02d}-{day:02d}",
            "weekday": r.choice(_DAYS), "weekday2": r.choice(_DAYS),
            "time": self._time(), "time2": self._time(),
            "hour": f"{r.randint(7, 10)}am", "hour2": f"{r.randint(4, 8)}pm",
            "tollfree": f"1-800-{self._digits(3)}-{self._digits(4)}",
            "site": r.choice(("acme", "citybank", "riverside", "summit", "metroenergy")),
            "house": r.choice((r.randint(1, 99), r.randint(100, 9999))),
            "street": r.choice(_STREETS), "kind": r.choice(_STREET_KINDS),
            "city": r.choice(_CITIES), "zip": self._digits(5),
            "pct": r.choice((5, 10, 15, 20, 25, 30, 50)),
            "rate": f"{r.randint(1, 19)}.{r.randint(1, 9)}",
            "small": r.randint(2, 9), "small2": r.randint(10, 14), "digit": r.randint(1, 9),
            "count": f"{r.randint(1, 99)},{r.randint(0, 999):03d}" if r.random() < 0.5
            else str(r.randint(11, 999)),
            "year": r.randint(1990, 2024), "ordinal": r.choice(("1st", "2nd", "3rd", "4th",
                                                               "final", "next")),
            "days": r.choice((14, 30, 60, 90)), "plan": r.choice(("19.99", "29", "45.50", "9.99")),
            "letters": "".join(r.choice("ABCDEFGHJKLMNPRSTUVWXYZ") for _ in range(2)),
            "gate": f"{r.choice('ABCDE')}{r.randint(1, 40)}", "room": r.randint(101, 950),
            "floorth": r.choice(("2nd", "3rd", "5th", "12th", "21st")),
            "temp": r.randint(40, 95),
            "spelled_code": "-".join(r.choice("ABCDEFGHJKLMNPRSTUVWXYZ0123456789")
                                     for _ in range(r.randint(3, 6))),
        }
        return r.choice(_TEMPLATES).format(**fields)
