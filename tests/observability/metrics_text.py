"""Reading a scrape in tests: Prometheus text parsed with prometheus-client's own parser."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.parser import text_string_to_metric_families

Labels = frozenset[tuple[str, str]]


def samples(text: str) -> dict[str, dict[Labels, float]]:
    """Every sample of a scrape: `{sample name: {label set: value}}`."""
    found: dict[str, dict[Labels, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, {})[frozenset(sample.labels.items())] = sample.value
    return found


def value(text: str, name: str, **labels: str) -> float:
    """The sum of `name`'s samples whose labels include `labels` (0 when none)."""
    wanted = set(labels.items())
    return sum(v for label_set, v in samples(text).get(name, {}).items() if wanted <= label_set)


def label_values(text: str, label: str, names: Iterable[str] | None = None) -> set[str]:
    """Every value `label` takes in the scrape (in the samples of `names` only, when given)."""
    chosen = set(names) if names is not None else None
    return {v for name, series in samples(text).items() if chosen is None or name in chosen
            for label_set in series for k, v in label_set if k == label}
