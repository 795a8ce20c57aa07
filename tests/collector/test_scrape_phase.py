"""A cycle ends just before the scrapers come, when they come at one phase (collector/scrape_phase.py)."""

import random

import pytest

from collector.scrape_phase import MARGIN_SECONDS, ScrapePhase


def scraped(phase: ScrapePhase, times: list[float]) -> None:
    for t in times:
        phase.seen(t)


def test_a_scraper_every_interval_gives_its_phase() -> None:
    phase = ScrapePhase(1.0)
    scraped(phase, [1000.7 + k + random.uniform(-0.005, 0.005) for k in range(10)])
    assert phase.phase(1010.0) == pytest.approx(0.7, abs=0.01)


def test_a_phase_next_to_the_interval_boundary_is_one_phase_not_two() -> None:
    phase = ScrapePhase(1.0)
    scraped(phase, [1000.995 + k + (0.01 if k % 2 else 0.0) for k in range(10)])  # 0.995 and 0.005
    found = phase.phase(1011.0)
    assert found is not None
    assert min(found, 1 - found) < 0.01


def test_a_scraper_every_15_seconds_at_a_fixed_offset_counts_as_well() -> None:
    phase = ScrapePhase(1.0)
    scraped(phase, [1000.3 + 15 * k for k in range(8)])
    assert phase.phase(1000.3 + 15 * 7 + 1) == pytest.approx(0.3, abs=0.01)


def test_scrapes_spread_over_the_interval_give_no_phase() -> None:
    rng = random.Random(7)
    phase = ScrapePhase(1.0)
    scraped(phase, sorted(1000 + rng.uniform(0, 100) for _ in range(300)))
    assert phase.phase(1100.0) is None
    assert ScrapePhase(1.0).phase(5.0) is None  # nobody scraped yet


def test_prometheus_stands_out_from_a_client_polling_ten_times_a_second() -> None:
    rng = random.Random(3)
    phase = ScrapePhase(1.0)
    times = [1000.42 + k for k in range(60)]
    t = 1000.0
    while t < 1060:
        times.append(t)
        t += 0.1 + rng.uniform(0, 0.03)  # a poller whose own work makes it drift over the interval
    scraped(phase, sorted(times))
    assert phase.phase(1060.0) == pytest.approx(0.42, abs=0.015)


def test_scrapes_older_than_the_window_are_forgotten() -> None:
    phase = ScrapePhase(1.0)
    scraped(phase, [1000.2 + k for k in range(10)])
    assert phase.phase(1010.0) is not None
    assert phase.phase(1010.0 + 200) is None


def test_the_next_cycle_is_moved_to_end_a_margin_before_the_scrape() -> None:
    phase = ScrapePhase(1.0)
    assert phase.wait(natural_start=1010.1, duration=0.02, now=1009.2) == pytest.approx(0.9)  # no scraper: as is
    scraped(phase, [1000.6 + k for k in range(10)])
    wait = phase.wait(natural_start=1010.1, duration=0.02, now=1009.2)
    end = 1009.2 + wait + 0.02
    assert end % 1.0 == pytest.approx(0.6 - MARGIN_SECONDS)
    assert 1009.2 + wait - 1010.1 == pytest.approx(0.43)  # later this once: within half an interval


def test_a_move_of_more_than_half_an_interval_goes_the_other_way() -> None:
    phase = ScrapePhase(1.0)
    scraped(phase, [1000.1 + k for k in range(10)])
    wait = phase.wait(natural_start=1010.5, duration=0.0, now=1009.6)
    assert 1009.6 + wait == pytest.approx(1010.05)  # 0.45 earlier rather than 0.55 later, never before now
    assert phase.wait(natural_start=1010.5, duration=0.0, now=1010.2) == 0.0
