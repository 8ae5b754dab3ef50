"""collect.backend.Backend, the interface the drivers (checks.run, probes.run) take as ``io``: both backends,
collect.ssh's SshBackend and collect.srun's SlurmBackend, implement it -- every member, with the protocol's
parameters -- and the run verbs get one from backend.opened."""

from __future__ import annotations

import inspect
from types import SimpleNamespace

from clustercert.collect import backend, srun, ssh
from clustercert.collect.backend import Backend
from clustercert.model.evidence import NodeEvidence


def members(proto: type) -> set[str]:
    """The protocol's own members: its methods and its annotated attributes."""
    methods = {n for n, v in vars(proto).items() if callable(v) and not n.startswith("_")}
    return methods | set(vars(proto).get("__annotations__", {}))


def parameters(fn) -> list[tuple[str, object, object]]:
    """(name, kind, default) of each parameter, ``self`` left out."""
    params = inspect.signature(fn).parameters.values()
    return [(p.name, p.kind, p.default) for p in params if p.name != "self"]


def signature_mismatches(impl, proto: type = Backend) -> list[str]:
    """The protocol's methods that ``impl`` (a class, or a module of functions) lacks or takes other
    parameters in."""
    out = []
    for name in sorted(members(proto)):
        want = vars(proto).get(name)
        if not callable(want):  # an attribute (job_id)
            continue
        got = getattr(impl, name, None)
        if got is None:
            out.append(f"{name}: missing")
        elif parameters(got) != parameters(want):
            out.append(f"{name}: {parameters(got)} != {parameters(want)}")
    return out


def slurm_backend() -> srun.SlurmBackend:
    return srun.SlurmBackend(SimpleNamespace(hosts={}), None, "", {})  # no agent: nothing is started


def test_both_backends_are_backends():
    assert members(Backend) == {"job_id", "runner_limit", "collect_node", "collect_many", "collect_in_turn",
                                "start_server", "stop_server", "finish_probe", "run_server_client"}
    assert isinstance(ssh.SshBackend(), Backend)
    assert isinstance(slurm_backend(), Backend)
    assert ssh.SshBackend().job_id is None and slurm_backend().job_id is None  # no job taken yet


def test_the_check_fails_where_a_member_is_missing_or_takes_other_parameters():
    class Partial:
        job_id = None

        def collect_node(self, node, conn, commands):  # neither keyword-only options nor the other members
            raise AssertionError

    assert not isinstance(Partial(), Backend)
    mismatches = signature_mismatches(Partial)
    assert any(m.startswith("collect_node: [") for m in mismatches)
    assert "collect_many: missing" in mismatches


def test_slurm_and_the_ssh_functions_take_the_protocol_s_parameters():
    """SlurmBackend's methods, and the collect.ssh functions SshBackend hands its calls to, take exactly the
    protocol's parameters (names, kinds, defaults): a call the drivers make fits either."""
    assert signature_mismatches(srun.SlurmBackend) == []
    assert signature_mismatches(ssh) == []
    for name in members(Backend) - {"job_id"}:
        assert callable(getattr(ssh.SshBackend, name)), name


def test_the_ssh_backend_runs_the_module_s_function_of_the_time_with_the_arguments_as_given(monkeypatch):
    calls = []

    def fake(node, conn, commands, **kw):
        calls.append((node, conn, commands, kw))
        return NodeEvidence(node, True)

    monkeypatch.setattr(ssh, "collect_node", fake)
    conn = {"ansible_host": "192.0.2.1"}
    ev = ssh.SshBackend().collect_node("n1", conn, {"x": ("true", 5)}, stages=[["x"]])
    assert ev.node == "n1" and ev.reachable
    assert calls == [("n1", {"ansible_host": "192.0.2.1"}, {"x": ("true", 5)}, {"stages": [["x"]]})]


def test_opened_gives_the_ssh_backend_by_default():
    with backend.opened(SimpleNamespace(hosts={}), "ssh") as io:
        assert isinstance(io, ssh.SshBackend) and isinstance(io, Backend)
