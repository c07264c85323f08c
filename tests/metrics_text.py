"""Read a Prometheus text exposition the way a scraper does (tests' helper).

    sample(text, 'parley_calls_total{transport="twilio"}')   # -> 1.0, or KeyError
    series(text, "parley_engine_workers")                      # -> {'...{engine="x"}': 1.0, ...}

Label order and number formatting ("1" or "1.0") do not matter: bucket bounds compare as numbers.
"""

from __future__ import annotations

import re

from prometheus_client.parser import text_string_to_metric_families

_SERIES = re.compile(r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?$')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _norm(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    def value(k: str, v: str) -> str:
        return repr(float(v)) if k == "le" else v
    return tuple(sorted((k, value(k, v)) for k, v in labels.items()))


def _samples(text: str):
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            yield s.name, _norm(s.labels), s.value


def sample(text: str, series_name: str) -> float:
    """The value of one series, written as ``name{label="value",...}``."""
    m = _SERIES.match(series_name)
    if m is None:
        raise ValueError(f"not a series: {series_name!r}")
    want = (m["name"], _norm(dict(_LABEL.findall(m["labels"] or ""))))
    for name, labels, value in _samples(text):
        if (name, labels) == want:
            return value
    raise KeyError(series_name)


def series(text: str, name: str) -> dict[str, float]:
    """Every sample named ``name``, keyed ``name{k="v",...}`` (labels sorted)."""
    return {name + "{" + ",".join(f'{k}="{v}"' for k, v in labels) + "}": value
            for n, labels, value in _samples(text) if n == name}
