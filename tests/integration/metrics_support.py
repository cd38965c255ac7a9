"""Scraping a broker's ``/metrics`` with prometheus_client's own text parser (the metrics
tests of issue 15)."""

from __future__ import annotations

import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["Samples", "scrape", "value"]

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(b: Any) -> Samples:
    """Every sample of the endpoint, parsed by prometheus_client: (name, labels) -> value."""
    url = f"http://127.0.0.1:{b.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200
        text = r.read().decode()
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(samples: Samples, name: str, **labels: str) -> float:
    """One sample; 0 when the series does not exist yet (a counter not yet touched)."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)
