"""clustercert.record.settle as certify uses it: between its stages what a stage made is collected once and
set aside from the cyclic garbage collector (gc.freeze), and given back at the end of the run."""

import gc

from clustercert.commands import certify, context
from clustercert.record import settle as settling


def test_settle_sets_aside_what_lives_on():
    keep = [{"node": i} for i in range(1000)]
    try:
        settling.settle()
        assert gc.get_freeze_count() >= len(keep)
    finally:
        gc.unfreeze()
    assert gc.get_freeze_count() == 0


def test_settle_every_settles_every_nth_call(monkeypatch):
    calls = []
    monkeypatch.setattr(settling, "settle", lambda: calls.append(1))
    tick = settling.settle_every(3)
    for _ in range(7):
        tick()
    assert len(calls) == 2


def test_run_gives_back_what_was_set_aside(monkeypatch, tmp_path):
    class Args:
        drain, key, out, backend = None, None, str(tmp_path), "ssh"

    def fake(*_a, **_k):
        settling.settle()
        raise RuntimeError("stopped")

    inv = type("Inv", (), {"source": tmp_path / "hosts.yml"})()
    monkeypatch.setattr(context, "inventory", lambda args: inv)
    monkeypatch.setattr(certify.certificate, "load_or_create_key", lambda *a: (None, tmp_path / "k.pub"))
    monkeypatch.setattr(context, "Store", lambda: None)
    monkeypatch.setattr(certify, "_certify", fake)
    try:
        certify.run(Args())
    except RuntimeError:
        pass
    assert gc.get_freeze_count() == 0
