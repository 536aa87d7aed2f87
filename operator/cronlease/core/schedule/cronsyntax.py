"""The cron grammar of Kubernetes CronJob, read into the explicit form croniter evaluates.

CronJob parses schedules with robfig/cron v3 (`cron.ParseStandard`); a schedule a CronJob
accepts must mean the same here, or a migration runs at other times. croniter reads several
valid items differently ("5-5" is the whole cycle to it, "?" only works in day fields), so no
expression reaches croniter as written: each field is read by robfig's rules into the values it
names, and croniter gets "*" or an explicit list of numbers.

robfig's rules, field by field: a comma-separated list of items; an item is "*" or "?" (every
value), a value, or a range "a-b" with a <= b, each optionally followed by "/step" (step >= 1);
"a/step" means "a-max/step". Values are decimal numbers or, for months and days of the week,
three-letter English names, in any case. A field whose items include a bare "*" or "?" (or one
with step 1) is unrestricted: that decides how day-of-month and day-of-week combine (both
restricted: either may match; otherwise both must), and croniter decides it the same way from
the "*" it is given.

What this accepts beyond robfig (decision 0013; design note 68): a seconds field first (6 fields), 7
for Sunday as in Vixie cron, and "L" (the last day of the month) as an item of day-of-month, which
croniter evaluates. What robfig accepts and this does not: the accidents of its tokenizer (an empty
list item "1,,2", a signed number "+5", a bound after a star "*-5"), and "@every" with a duration
below one second (`every_seconds`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_WEEKDAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_NUMBER = re.compile(r"[0-9]+")
LAST_DAY = "L"


@dataclass(frozen=True)
class Field:
    """One field of the expression: its name in messages and the values robfig allows."""

    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()  # names[i] is the value low + i
    # Values beyond `high` that an explicit item may name, folded onto the cycle (7 is Sunday).
    wraps_to_low: bool = False

    def value(self, text: str) -> int:
        if _NUMBER.fullmatch(text):
            value = int(text)
            top = self.high + 1 if self.wraps_to_low else self.high
            if not self.low <= value <= top:
                raise CronSyntaxError(f"{text} is outside {self.low}-{top}")
            return value
        if text.upper() in self.names:
            return self.low + self.names.index(text.upper())
        raise CronSyntaxError(f'"{text}" is not a {self.name} value')


SECOND = Field("second", 0, 59)
MINUTE = Field("minute", 0, 59)
HOUR = Field("hour", 0, 23)
DAY_OF_MONTH = Field("day-of-month", 1, 31)
MONTH = Field("month", 1, 12, _MONTHS)
DAY_OF_WEEK = Field("day-of-week", 0, 6, _WEEKDAYS, wraps_to_low=True)
MINUTE_FIELDS = (MINUTE, HOUR, DAY_OF_MONTH, MONTH, DAY_OF_WEEK)
SECOND_FIELDS = (SECOND, *MINUTE_FIELDS)


class CronSyntaxError(ValueError):
    """Why an item is invalid; the caller adds the field."""


def read_field(text: str, field: Field) -> str:
    """The field as croniter must get it: "*" if unrestricted, else its values, ascending."""
    values: set[int] = set()
    unrestricted = last_day = False
    for item in text.split(","):
        if field is DAY_OF_MONTH and item.upper() == LAST_DAY:
            last_day = True
            continue
        named, star = _read_item(item, field)
        values |= named
        unrestricted |= star
    if unrestricted:
        return "*"
    if field.wraps_to_low:
        values = {field.low if value > field.high else value for value in values}
    listed = [str(value) for value in sorted(values)] + ([LAST_DAY] if last_day else [])
    return ",".join(listed)


def _read_item(item: str, field: Field) -> tuple[set[int], bool]:
    """The values an item names, and whether it is unrestricted (a star with step 1)."""
    if not item:
        raise CronSyntaxError("an empty list item")
    span, slash, step_text = item.partition("/")
    step = 1
    if slash:
        if not _NUMBER.fullmatch(step_text):
            raise CronSyntaxError(f'"{step_text}" is not a step (a whole number from 1)')
        step = int(step_text)
        if step == 0:
            raise CronSyntaxError("a step must be 1 or more")
    if span in ("*", "?"):
        return set(range(field.low, field.high + 1, step)), step == 1
    low_text, dash, high_text = span.partition("-")
    low = field.value(low_text)
    high = low
    if dash:
        high = field.value(high_text)
    elif slash:
        high = field.high  # "a/step" runs to the end of the cycle
    if low > high:
        raise CronSyntaxError(f'range "{span}" runs backwards')
    return set(range(low, high + 1, step)), False


# Go's time.ParseDuration units, as robfig reads "@every <duration>" (ASCII only: "us", not "µs").
_DURATION_UNITS = {"ns": Fraction(1, 10**9), "us": Fraction(1, 10**6), "ms": Fraction(1, 1000)}
_DURATION_UNITS |= {"s": Fraction(1), "m": Fraction(60), "h": Fraction(3600)}
_DURATION_PART = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|ms|s|m|h)")
MAX_EVERY_SECONDS = 100 * 366 * 86_400  # a century: any longer names no slot a Job would see


def every_seconds(duration: str) -> int:
    """The period of "@every <duration>", in whole seconds (robfig truncates, as here).

    Go's duration syntax: a sequence of decimal numbers, each with a unit (ns, us, ms, s, m,
    h), as in "1h30m" or "1.5h". robfig turns zero, a negative or anything under a second into
    one second; that is a typo far more often than a wish, so it is refused here."""
    text = duration.strip()
    position, total = 0, Fraction(0)
    while position < len(text):
        match = _DURATION_PART.match(text, position)
        if match is None or match.group(1) in ("", "."):
            raise CronSyntaxError(f'"{duration}" is not a duration such as 90s, 15m or 1h30m')
        total += Fraction(match.group(1)) * _DURATION_UNITS[match.group(2)]
        position = match.end()
    if not text:
        raise CronSyntaxError("@every needs a duration such as 90s, 15m or 1h30m")
    if total < 1:
        raise CronSyntaxError(f'"{duration}" is less than a second')
    if total > MAX_EVERY_SECONDS:
        raise CronSyntaxError(f'"{duration}" is more than a century')
    return int(total)
