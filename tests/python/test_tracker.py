"""RecycledTracker: each recycled-index notice applied once, in order, from
wherever the stream starts (audit: a stream beginning past #1, e.g. from a
replica started on a copied snapshot, kept every number in the tracker's set
for good: 612,896 entries after 40K rows)."""
from types import SimpleNamespace

from piperec_client import RecycledTracker


def batch(*numbers):
    return SimpleNamespace(recycled=[(0, 7, 0, n) for n in numbers])


def test_starts_at_the_first_number_it_meets():
    t = RecycledTracker()
    assert t.fresh(batch()) == []
    assert [n[3] for n in t.fresh(batch(72487, 72488))] == [72487, 72488]
    assert [n[3] for n in t.fresh(batch(72489, 72491))] == [72489, 72491]
    assert t.last == 72489 and t.state_dict()["seen"] == [72491]
    assert [n[3] for n in t.fresh(batch(72490, 72491, 72492))] == [72490, 72492]
    assert t.last == 72492 and t.state_dict()["seen"] == []
    # numbers below the start: before this tracker's time, never applied
    assert t.fresh(batch(5)) == []


def test_restored_tracker_keeps_its_position():
    t = RecycledTracker()
    t.load_state_dict({"last": 10, "seen": [12]})
    assert [n[3] for n in t.fresh(batch(11, 12, 13))] == [11, 13]
    assert t.last == 13
    t = RecycledTracker(last=3)  # a given position is one too
    assert [n[3] for n in t.fresh(batch(2, 4, 9))] == [4, 9]
    assert t.last == 4 and t.state_dict()["seen"] == [9]


def test_from_one_as_before():
    t = RecycledTracker()
    assert [n[3] for n in t.fresh(batch(1, 2, 3))] == [1, 2, 3]
    assert [n[3] for n in t.fresh(batch(2, 3, 4))] == [4]  # re-announced after a restart
    assert t.last == 4 and t.state_dict()["seen"] == []
