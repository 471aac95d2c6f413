"""correlators.xid: the XID catalog table and the classifications the engine uses."""

from __future__ import annotations

import filecmp
from pathlib import Path

import pytest

from correlators import xid
from correlators.rules import load_rule_pack
from schemas.records import Observation, Position, Source

REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference" / "xid-catalog.csv"

#: codes the reference README says the catalog marks unused for A100/H100/B100/GB200
UNUSED = [*range(1, 8), 9, 10, 12, *range(15, 25), *range(26, 31), *range(33, 37), 42, 47,
          *range(49, 54), *range(55, 60), 61, 65, 73, 81, 87, 90, 91, *range(111, 119),
          *range(122, 126), 138]


def test_packaged_copy_is_the_reference_table() -> None:
    assert filecmp.cmp(xid.CATALOG_PATH, REFERENCE, shallow=False)


def test_catalog_rows() -> None:
    cat = xid.catalog()
    assert len(cat) == 111
    assert min(cat) == 8 and max(cat) == 172
    info = xid.xid_info(79)
    assert info == xid.XidInfo(
        xid=79, mnemonic="ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS",
        description="GPU has fallen off the bus", immediate_action="RESTART_BM",
        investigatory_action="CONTACT_SUPPORT", nvsentinel_action="RESTART_BM",
        gpus=("A100", "H100", "B100", "GB200"))
    assert xid.xid_info(48).immediate_action == "WORKFLOW_XID_48"
    assert xid.xid_info(54).gpus == ("A100", "H100", "B100")
    # "—" cells are blank, not a dash
    assert xid.xid_info(171).immediate_action == "" and xid.xid_info(142).investigatory_action == ""
    assert all(row.mnemonic for row in cat.values())


@pytest.mark.parametrize("code", UNUSED)
def test_unused_codes_are_not_listed(code: int) -> None:
    assert xid.xid_info(code) is None
    assert xid.action_bucket(code) == "UNKNOWN"


def test_classifications() -> None:
    assert [c for c in (13, 31, 43, 79) if xid.is_app_workflow(c)] == [13, 31]
    sympathetic = [c for c in xid.catalog() if xid.is_sympathetic(c)]
    assert sympathetic == [45, 94, 95, 154, 159]
    assert not xid.is_sympathetic(79) and not xid.is_sympathetic(999)
    assert xid.action_bucket(31) == "RESTART_APP"
    assert xid.action_bucket(62) == "RESET_GPU"
    assert xid.action_bucket(151) == "RESTART_VM"
    assert xid.needs_reset(48) and xid.needs_reset(119) and not xid.needs_reset(13)
    assert xid.needs_reboot(79) and xid.needs_reboot(151) and not xid.needs_reboot(48)
    assert xid.is_ignorable(43) and xid.is_ignorable(63) and not xid.is_ignorable(64)
    assert [c for c in xid.catalog() if xid.is_nvlink(c)] == [
        74, 108, 136, 137, 144, 145, 146, 147, 148, 149, 150, 155, 166, 170]


@pytest.mark.parametrize(
    "text, action",
    [
        ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", "RESET_GPU"),
        ("GPU recovery action changed from 0x0 (None) to <Drain and Reset>", "DRAIN_AND_RESET"),
        ("GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", "RESTART_BM"),
        ("GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)", "NONE"),
        ("Ch 00000001 caused by previous Xid 149", None),
    ],
)
def test_recovery_action(text: str, action: str | None) -> None:
    assert xid.recovery_action(text) == action


def test_every_catalog_code_round_trips_through_the_xid_rule() -> None:
    """Every catalogued XID, printed in the driver's format, becomes a gpu.xid event that
    carries its catalog row; an unknown code still yields an event with action UNKNOWN."""
    pack = load_rule_pack()
    for code in [*xid.catalog(), 1, 200]:
        obs = Observation(
            source=Source(connector="test"), kind="log_line", observed_at=1, time_source="line",
            time_quality=1.0, host="node-a01",
            body=f"[Mon Nov 30 01:21:04 2026] NVRM: Xid (PCI:0000:3B:00): {code}, pid=10, name=python3, detail",
            position=Position(file="dmesg", line=code),
        ).with_id()
        (ev,) = pack.extract(obs)
        info = xid.xid_info(code)
        assert ev.type == "gpu.xid" and ev.attributes["xid"] == code
        assert ev.gpu.pci_bus_id == "0000:3b:00"
        if info is None:
            assert ev.attributes["immediate_action"] == "UNKNOWN"
        else:
            assert ev.attributes["mnemonic"] == info.mnemonic
            assert ev.attributes["description"] == info.description
            assert ev.attributes["immediate_action"] == info.immediate_action
            assert ev.attributes["investigatory_action"] == info.investigatory_action
