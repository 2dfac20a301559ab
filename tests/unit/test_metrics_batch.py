"""metrics.observe_many against prometheus-client's own observe(): the worker records a
batch of jobs at once, and the histogram must read exactly as if each had been observed."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Histogram

from pgfleet import metrics

AMOUNTS = [0.0, 0.004, 0.01, 0.0100001, 0.3, 2.5, 7.0, 59.9, 4000.0, 0.01]


def samples(histogram: Histogram, registry: CollectorRegistry) -> dict[tuple[str, str], float]:
    out = {}
    for family in registry.collect():
        for sample in family.samples:
            if sample.name.endswith(("_bucket", "_count", "_sum")):
                out[(sample.name, sample.labels.get("le", ""))] = sample.value
    return out


def histogram() -> tuple[Histogram, CollectorRegistry]:
    registry = CollectorRegistry()
    made = Histogram("h", "test", ["queue"], buckets=metrics.TIME_BUCKETS, registry=registry)
    return made, registry


def test_a_batch_reads_like_one_observation_each() -> None:
    one, one_registry = histogram()
    many, many_registry = histogram()
    for amount in AMOUNTS:
        one.labels("q").observe(amount)
    metrics.observe_many(many.labels("q"), AMOUNTS)
    expected = samples(one, one_registry)
    assert expected[("h_count", "")] == len(AMOUNTS)
    assert samples(many, many_registry) == expected


def test_an_empty_batch_writes_nothing() -> None:
    many, registry = histogram()
    metrics.observe_many(many.labels("q"), [])
    assert samples(many, registry)[("h_count", "")] == 0


def test_nan_is_left_out_instead_of_poisoning_the_sum() -> None:
    many, registry = histogram()
    metrics.observe_many(many.labels("q"), [0.5, float("nan")])
    got = samples(many, registry)
    assert got[("h_count", "")] == 1 and got[("h_sum", "")] == 0.5
