"""GPU-NIC rails discovered per node (clustercert.checks.rails), on the real 8x H100 12-NIC capture.

The capture (deepseek-ai/DeepEP#397) shows GPU0 and GPU4 with three PIX NICs each: the compute rail among them
is the one at the profile's rate and link layer (sysfs), not the first name. Each path that uses the rails is
held here: the validators (gpu.nic_affinity, nccl.config), the peers' comparison, the certificate's node
section, the probes' commands, and the ib_redundancy role's nccl.conf (its filter applies the same function).
"""

from __future__ import annotations

import base64
import importlib.util
import re
from pathlib import Path
from types import SimpleNamespace

import jinja2
import pytest

from clustercert.checks import HostContext, rails
from clustercert.checks import hardware as hardware_checks
from clustercert.checks import ib as ib_checks
from clustercert.checks import run as check_run
from clustercert.errors import InputError
from clustercert.model.evidence import CommandResult, NodeEvidence
from clustercert.model.inventory import HostView, Inventory, InventoryVars
from clustercert.model.profile import load_profile
from clustercert.parsers import parse
from clustercert.probes.plan import ProbeSettings, node_plan, pair_plan
from clustercert.record.results import build_nodes

ROOT = Path(__file__).resolve().parent.parent
FIX = Path(__file__).resolve().parent / "fixtures"
TOPO = (FIX / "nvidia-smi" / "topo-mp-8xH100-12NIC-nic-legend-tabs.txt").read_text()
SYSFS = (FIX / "sysfs" / "sysfs-ib-rate-link-layer-12x-h100-from-gpud-ibstat-constructed.txt").read_text()
IBSTAT = (FIX / "ibstat" / "ibstat-12x-h100-ib-3ports-down-disabled.txt").read_text()
H100 = load_profile("h100-sxm-8x-ndr")
COMPUTE = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]


def res(text: str, rc: int = 0, command: str = "x") -> CommandResult:
    return CommandResult(rc, text, "", False, 0.1, command)


def swapped(text: str) -> str:
    """The capture as a node whose kernel named two rails the other way round (mlx5_9 <-> mlx5_10)."""
    return text.replace("mlx5_10", "@").replace("mlx5_9", "mlx5_10").replace("@", "mlx5_9")


# ---- the rule, on the real capture
# --------------------------------------------------------------------------

def test_the_12_nic_h100_capture_gives_compute_rails_0_3_4_5_6_9_10_11_paired_with_gpus_0_to_7():
    topo, sysfs = parse("nvidia-smi-topo", TOPO), parse("sysfs-infiniband", SYSFS)
    nr = rails.node_rails(H100, topo, sysfs)
    assert nr.problems == () and nr.source == "discovered"
    assert [(r.gpu, r.hca) for r in nr.rails] == list(enumerate(COMPUTE))
    assert [r.numa for r in nr.rails] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert {r.link for r in nr.rails} == {"PIX"}


def test_the_rule_reads_ibstat_s_view_of_the_same_ports_alike():
    """The ports' rate and link layer as the real ibstat output shows them (the sysfs fixture is built from
    it)."""
    ib = parse("ibstat", IBSTAT)
    ports = {ca["name"]: {"rate_gbit_per_s": ca["ports"][0]["rate_gbit_per_s"],
                          "link_layer": ca["ports"][0]["link_layer"]} for ca in ib["cas"]}
    pairs, problems = rails.select(parse("nvidia-smi-topo", TOPO), ports, count=8, rate_gbit_per_s=400,
                                   affinity="PIX", link_layer="InfiniBand")
    assert problems == [] and [p["hca"] for p in pairs] == COMPUTE


def test_first_pix_name_is_not_taken_blindly_a_nic_left_without_a_gpu_is_a_problem():
    """Were every NIC a 400G InfiniBand one, GPU0's second and third PIX NICs would have no GPU left: the rule
    says so instead of picking names."""
    all_ib = re.sub(r"rate:\d+ Gb/sec \([^)]*\)", "rate:400 Gb/sec (4X NDR)", SYSFS).replace(
        "Ethernet", "InfiniBand"
    )
    nr = rails.node_rails(H100, parse("nvidia-smi-topo", TOPO), parse("sysfs-infiniband", all_ib))
    assert nr.rails is None
    assert any("mlx5_1 is PIX only to GPUs that have a rail already (GPU0)" in p for p in nr.problems)


def test_a_rail_missing_its_rate_is_counted_and_named():
    slow = SYSFS.replace("mlx5_9/ports/1/rate:400 Gb/sec (4X NDR)", "mlx5_9/ports/1/rate:200 Gb/sec (4X HDR)")
    nr = rails.node_rails(H100, parse("nvidia-smi-topo", TOPO), parse("sysfs-infiniband", slow))
    assert nr.rails is None
    assert nr.problems == ("found 7 400 Gb/s InfiniBand NICs PIX to a GPU, the profile has 8 rails "
                           "(hardware.rails.count): GPU0 mlx5_0, GPU1 mlx5_3, GPU2 mlx5_4, GPU3 mlx5_5, GPU4 "
                           "mlx5_6, GPU6 mlx5_10, GPU7 mlx5_11; GPUs without one: GPU5",)


def test_a_nic_name_that_could_not_reach_a_command_is_refused():
    bad_topo = TOPO.replace("NIC3: mlx5_3", "NIC3: mlx5_3;reboot")
    bad_sysfs = SYSFS.replace("mlx5_3/", "mlx5_3;reboot/")
    pairs, problems = rails.select(parse("nvidia-smi-topo", bad_topo),
                                   rails.ports_of(parse("sysfs-infiniband", bad_sysfs)), count=8,
                                   rate_gbit_per_s=400, affinity="PIX", link_layer="InfiniBand")
    assert "mlx5_3;reboot" not in [p["hca"] for p in pairs]
    assert any(p.startswith("NIC NIC3:") for p in problems)


def test_pairs_come_in_gpu_order_gpu_10_after_gpu_2():
    topo = {
        "devices": [{"name": f"GPU{g}", "kind": "gpu"} for g in (10, 2)]
        + [
            {"name": "NIC0", "kind": "nic", "nic_name": "mlx5_a"},
            {"name": "NIC1", "kind": "nic", "nic_name": "mlx5_b"},
        ],
        "matrix": {"GPU10": {"NIC0": "PIX", "NIC1": "SYS"}, "GPU2": {"NIC0": "SYS", "NIC1": "PIX"}},
        "affinity": {},
    }
    ports = {n: {"rate_gbit_per_s": 400, "link_layer": "InfiniBand"} for n in ("mlx5_a", "mlx5_b")}
    pairs, problems = rails.select(
        topo, ports, count=2, rate_gbit_per_s=400, affinity="PIX", link_layer="InfiniBand"
    )
    assert problems == [] and [(p["gpu"], p["hca"]) for p in pairs] == [(2, "mlx5_b"), (10, "mlx5_a")]


# ---- the profiles
# ---------------------------------------------------------------------------------------------

def test_the_h100_profile_names_no_compute_hca_it_states_count_rate_and_affinity():
    assert not [h for h in H100.ib.hcas if h.role == "compute"]
    assert not H100.hardware.nic_gpu
    text = (ROOT / "src" / "clustercert" / "profiles" / "h100-sxm-8x-ndr.yml").read_text()
    assert not re.search(r"\bmlx5_[0-7]\b", text)
    spec = H100.hardware.rails
    assert (spec.count, spec.rate_gbit_per_s, spec.affinity) == (8, 400, "PIX")


def test_gpudirect_without_compute_rails_is_bad_input():
    with pytest.raises(InputError) as exc:
        load_profile("h100-sxm-8x-ndr", {"hardware": {"rails": None}})
    assert "gpudirect: the profile has no compute rails" in str(exc.value)


def test_fixed_names_stay_possible_and_give_the_rails_in_gpu_order():
    site = load_profile(
        "h100-sxm-8x-ndr", {"hardware": {"nic_gpu": dict(zip(COMPUTE, range(8), strict=True))}}
    )
    nr = rails.node_rails(site, parse("nvidia-smi-topo", TOPO), None)
    assert nr.source == "profile" and nr.names == COMPUTE and nr.rails[5].numa == 1


def test_the_lab_profile_keeps_its_two_rails():
    lab = load_profile("lab")
    nr = rails.node_rails(lab, None, None)
    assert [(r.gpu, r.hca, r.fabric) for r in nr.rails] == [(0, "mlx5_0", 0), (4, "mlx5_1", 1)]


# ---- the validators
# -------------------------------------------------------------------------------------------

def ev(topo: str = TOPO, sysfs: str = SYSFS, nccl: str | None = None) -> dict:
    out = {"nvsmi_topo": res(topo, command="nvidia-smi topo -m"), "ib_sysfs": res(sysfs, command="grep")}
    if nccl is not None:
        out["nccl_conf"] = res(nccl, command="cat /etc/nccl.conf")
    return out


def test_gpu_nic_affinity_passes_each_discovered_rail_and_fails_a_short_count():
    ctx = HostContext("gpu01", H100, timeout_s=10)
    fs = hardware_checks.nic_affinity(res(TOPO), ctx, res(SYSFS))
    assert [(f.status, f.subject) for f in fs] == [("pass", h) for h in COMPUTE]
    assert fs[5].observed == "PIX to GPU5, NUMA node 1"
    slow = SYSFS.replace("mlx5_6/ports/1/rate:400", "mlx5_6/ports/1/rate:200")
    (f,) = hardware_checks.nic_affinity(res(TOPO), ctx, res(slow))
    assert f.status == "fail" and "GPUs without one: GPU4" in f.observed
    (f,) = hardware_checks.nic_affinity(res(TOPO), ctx, res("", rc=1))
    assert f.status == "error" and "rails not discovered" in f.observed


def test_nccl_conf_is_held_to_the_discovered_rails():
    ctx = HostContext("gpu01", H100, timeout_s=10)
    good = "NCCL_IB_HCA==" + ",".join(COMPUTE) + "\n"
    fs = [f for f in ib_checks.evaluate(ev(nccl=good), ctx) if f.check == "nccl.config"]
    assert [f.status for f in fs] == ["pass"]
    old = "NCCL_IB_HCA==mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7\n"  # the old profile's names
    (f,) = [f for f in ib_checks.evaluate(ev(nccl=old), ctx) if f.check == "nccl.config"]
    assert f.status == "fail"
    (f,) = [f for f in ib_checks.evaluate(ev(sysfs="", nccl=good) | {"ib_sysfs": res("", rc=2)}, ctx)
            if f.check == "nccl.config"]
    assert f.status == "error" and "compute rails are unknown" in f.observed


def test_the_discovered_rails_ports_are_checked_too():
    ctx = HostContext("gpu01", H100, timeout_s=10)
    subjects = {f.subject for f in ib_checks.evaluate(ev(nccl=""), ctx) if f.check == "ib.port_rate"}
    assert {f"{h}/1" for h in COMPUTE} <= subjects


class FakeIO:
    def __init__(self, per_node: dict[str, dict]):
        self.per_node = per_node

    def collect_many(self, nodes, commands_for, *, forks=25, control_dir=None, each=None):
        out = {}
        for n in nodes:
            e = NodeEvidence(n, True, "", self.per_node[n])
            out[n] = each(n, e) if each else e
        return out


def inventory(names: list[str], profile=H100) -> Inventory:
    hosts = {n: HostView(name=n, groups=["all"], vars=InventoryVars(clustercert_profile="h100-sxm-8x-ndr",
                                                                    clustercert_command_timeout_s=10),
                         profile=profile, connection={"ansible_host": n}, bond_address=None) for n in names}
    return Inventory(source=Path("inv.yml"), hosts=hosts, files=[])


def test_a_node_whose_mapping_differs_from_its_peers_is_a_finding_and_the_certificate_records_each_mapping():
    per_node = {"gpu01": ev(), "gpu02": ev(), "gpu03": ev(swapped(TOPO), swapped(SYSFS))}
    results = check_run.validate_nodes(inventory(list(per_node)), ["hardware"], io=FakeIO(per_node))
    mine = [f for f in results["gpu03"].findings if f.check == "gpu.nic_affinity" and f.subject == "rails"]
    assert [f.status for f in mine] == ["fail"]
    assert (
        "GPU5 mlx5_10 (peers: mlx5_9); GPU6 mlx5_9 (peers: mlx5_10) -- 2 of 3 nodes have" in mine[0].observed
    )
    assert not [f for n in ("gpu01", "gpu02") for f in results[n].findings if f.subject == "rails"]
    assert results["gpu03"].verdict == "fail"
    outcome = SimpleNamespace(down=set(), per_node={}, localisation=[], why_down={})
    nodes = build_nodes(results, outcome)
    assert nodes["gpu01"]["rails"]["source"] == "discovered"
    assert [(p["gpu"], p["hca"], p["numa"]) for p in nodes["gpu01"]["rails"]["pairs"]] == \
        [(g, h, 0 if g < 4 else 1) for g, h in enumerate(COMPUTE)]
    assert nodes["gpu03"]["rails"]["pairs"][5]["hca"] == "mlx5_10"


def test_two_nodes_that_disagree_are_both_findings():
    diff = rails.peer_differences(
        {
            "a": rails.node_rails(H100, parse("nvidia-smi-topo", TOPO), parse("sysfs-infiniband", SYSFS)),
            "b": rails.node_rails(
                H100, parse("nvidia-smi-topo", swapped(TOPO)), parse("sysfs-infiniband", swapped(SYSFS))
            ),
        },
        {"a": "h100", "b": "h100"},
    )
    assert set(diff) == {"a", "b"}


# ---- the probes
# -----------------------------------------------------------------------------------------------

def host(name: str, profile=H100):
    return SimpleNamespace(name=name, connection={"ansible_host": name}, profile=profile,
                           vars=SimpleNamespace(clustercert_fabric_addresses={}, clustercert_slurm=False))


def discovered(topo: str = TOPO, sysfs: str = SYSFS):
    return rails.node_rails(H100, parse("nvidia-smi-topo", topo), parse("sysfs-infiniband", sysfs))


def test_rail_probes_use_the_discovered_names_quoted_and_pinned_to_the_gpu_s_numa_node():
    cfg = ProbeSettings(2, 20, rails={"gpu01": discovered()})
    np = node_plan(host("gpu01"), cfg)
    loops = [np.commands[f"loopback{i}"][0] for i in range(8)]
    assert [re.search(r"-d (\S+)", c).group(1) for c in loops] == COMPUTE
    gdr5 = np.commands["gdr5"][0]
    assert "-d mlx5_9 " in gdr5 and "--use_cuda=5" in gdr5 and "--cpunodebind=1" in gdr5


def test_a_pair_s_server_uses_its_own_node_s_rail_names():
    cfg = ProbeSettings(
        2, 20, rails={"gpu01": discovered(), "gpu02": discovered(swapped(TOPO), swapped(SYSFS))}
    )
    plan = pair_plan(
        host("gpu01"), host("gpu02"), 1, cfg, SimpleNamespace(eval_perftest=None, eval_iperf3=None)
    )
    jobs = plan.stages[0][0]
    assert plan.stages[0][1] == "ib_write_bw_pair" and len(jobs) == 8
    assert "-d mlx5_9 " in jobs[5].client[2] and "-d mlx5_10 " in jobs[5].server[2]
    assert plan.errors == []


def test_a_node_whose_rails_are_unknown_gets_an_error_per_rail_probe():
    cfg = ProbeSettings(2, 20, rails={"gpu01": discovered(sysfs=SYSFS.replace("InfiniBand", "Ethernet"))})
    np = node_plan(host("gpu01"), cfg)
    assert not [c for c in np.commands if c.startswith(("loopback", "gdr"))]
    assert np.unknown and np.expected == 8
    plan = pair_plan(
        host("gpu01"), host("gpu02"), 1, cfg, SimpleNamespace(eval_perftest=None, eval_iperf3=None)
    )
    bw = [m for m in plan.errors if m.threshold == "ib_write_bw_pair"]
    assert len(bw) == 8 and {m.status for m in bw} == {"error"}
    assert "gpu01: the node's compute rails are unknown: found 0" in bw[0].observed
    assert "gpu02: the node's compute rails are unknown: rails not discovered" in bw[0].observed


# ---- nccl.conf: the ib_redundancy role
# ------------------------------------------------------------------------

def _filter():
    path = ROOT / "plugins" / "filter" / "ib_redundancy_rails.py"
    spec = importlib.util.spec_from_file_location("ib_redundancy_rails_filter", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.FilterModule().filters()["ib_redundancy_compute_rails"]


def slurped(sysfs: str) -> list[dict]:
    """The role's slurp results over /sys/class/infiniband/<hca>/ports/1/{rate,link_layer} of a node."""
    out = []
    for line in sysfs.splitlines():
        path, value = line.split(":", 1)
        if path.endswith(("/rate", "/link_layer")):
            out.append({"source": f"/sys/class/infiniband/{path}", "encoding": "base64",
                        "content": base64.b64encode(f"{value}\n".encode()).decode(), "item": [{}, path]})
    return [*out, {"skipped": True, "item": [{}, "rate"]}]


def test_the_role_s_nccl_conf_comes_from_the_same_discovery():
    names = _filter()(TOPO, slurped(SYSFS), H100.hardware.rails.model_dump(mode="json"), "InfiniBand")
    assert names == COMPUTE
    # grep's lines alike
    assert _filter()(TOPO, SYSFS, H100.hardware.rails.model_dump(mode="json")) == COMPUTE
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(ROOT / "roles" / "ib_redundancy" / "templates"),
                             keep_trailing_newline=True)
    text = env.get_template("nccl.conf.j2").render(ansible_managed="managed", ib_redundancy_nccl_hcas=names,
                                                   ib_redundancy_nccl_env={})
    assert "NCCL_IB_HCA==mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11\n" in text
    # what the role wrote is what the validators hold the node to
    (f,) = [f for f in ib_checks.evaluate(ev(nccl=text), HostContext("gpu01", H100, timeout_s=10))
            if f.check == "nccl.config"]
    assert f.status == "pass"


def test_the_role_s_filter_fails_the_task_on_rails_other_than_the_profile_states():
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match="GPUs without one: GPU5"):
        _filter()(TOPO, SYSFS.replace("mlx5_9/ports/1/rate:400", "mlx5_9/ports/1/rate:200"),
                  H100.hardware.rails.model_dump(mode="json"))
    with pytest.raises(AnsibleFilterError, match="ib_redundancy_compute_rails"):
        _filter()("not a topology", SYSFS, H100.hardware.rails.model_dump(mode="json"))


def test_probe_alone_discovers_the_rails_first_and_a_silent_node_s_are_unknown():
    from clustercert.probes.run import discover_rails

    class Partial(FakeIO):
        def collect_many(self, nodes, commands_for, *, forks=25, control_dir=None, each=None):
            assert set(commands_for["gpu01"]) == {"nvsmi_topo", "ib_sysfs"}
            return {
                "gpu01": NodeEvidence("gpu01", True, "", self.per_node["gpu01"]),
                "gpu02": NodeEvidence("gpu02", False, "ssh: connect to host gpu02 port 22: No route to host"),
            }

    found = discover_rails(inventory(["gpu01", "gpu02"]), ["gpu01", "gpu02"], io=Partial({"gpu01": ev()}))
    assert found["gpu01"].names == COMPUTE
    assert found["gpu02"].rails is None and "gpu02 did not answer: ssh: connect" in found["gpu02"].problems[0]
