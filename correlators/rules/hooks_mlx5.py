"""Code hooks of the mlx5 / mlx4 / rdma-core rules (``correlators/rules/mlx5.yaml`` and the
module-event rule of ``fabric.yaml``): tables that turn the text or number a driver prints into
the vendor's enum name.

Sources of the tables (read, not copied):

* ``MLX5_HEALTH_SYNDR_*`` and ``hsynd_str()``: linux drivers/net/ethernet/mellanox/mlx5/core/health.c
  (4.x .. 6.x; the strings did not change, "Invalid EQ refrenced"/"High temprature" were the
  spellings before 5.3).
* ``MLX5_SENSOR_*``: the same file, ``check_fatal_sensors()`` / ``mlx5_health_check_fatal_sensors()``.
* ``MLX5_CMD_STAT_*`` and ``cmd_status_str()``: drivers/net/ethernet/mellanox/mlx5/core/cmd.c and
  include/linux/mlx5/device.h; ``MLX5_DRIVER_STATUS_ABORTED`` (0xfe, syndrome 0xbadd00de) is the
  status the driver fakes for a command it did not send because the device is in error state.
* mlx4 ``CMD_STAT_*``: drivers/net/ethernet/mellanox/mlx4/cmd.c.
* ``MLX5_MODULE_EVENT_ERROR_*``: drivers/net/ethernet/mellanox/mlx5/core/events.c
  (``mlx5_pme_error_to_string``; before 5.0 port.c / events.c ``mlx5_pme_error[]``).
* ``MLX5_CQE_SYNDROME_*`` -> ``IBV_WC_*``: rdma-core providers/mlx5/mlx5dv.h and cq.c
  (``mlx5_handle_error_cqe``); the error CQE layout (``struct mlx5_err_cqe``) for the hex dump.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from correlators.rules.code import Draft, hook

if TYPE_CHECKING:  # pragma: no cover
    from correlators.rules import Rule
    from schemas.records import Observation

#: health buffer syndrome (u8) -> enum name, from health.c
HEALTH_SYNDROMES: dict[int, str] = {
    0x1: "MLX5_HEALTH_SYNDR_FW_ERR",
    0x7: "MLX5_HEALTH_SYNDR_IRISC_ERR",
    0x8: "MLX5_HEALTH_SYNDR_HW_UNRECOVERABLE_ERR",
    0x9: "MLX5_HEALTH_SYNDR_CRC_ERR",
    0xA: "MLX5_HEALTH_SYNDR_FETCH_PCI_ERR",
    0xB: "MLX5_HEALTH_SYNDR_HW_FTL_ERR",
    0xC: "MLX5_HEALTH_SYNDR_ASYNC_EQ_OVERRUN_ERR",
    0xD: "MLX5_HEALTH_SYNDR_EQ_ERR",
    0xE: "MLX5_HEALTH_SYNDR_EQ_INV",
    0xF: "MLX5_HEALTH_SYNDR_FFSER_ERR",
    0x10: "MLX5_HEALTH_SYNDR_HIGH_TEMP",
}
#: hsynd_str() text (lower case, both spellings) -> enum name
HEALTH_SYNDROME_TEXT: dict[str, str] = {
    "firmware internal error": "MLX5_HEALTH_SYNDR_FW_ERR",
    "irisc not responding": "MLX5_HEALTH_SYNDR_IRISC_ERR",
    "unrecoverable hardware error": "MLX5_HEALTH_SYNDR_HW_UNRECOVERABLE_ERR",
    "firmware crc error": "MLX5_HEALTH_SYNDR_CRC_ERR",
    "icm fetch pci error": "MLX5_HEALTH_SYNDR_FETCH_PCI_ERR",
    "hw fatal error": "MLX5_HEALTH_SYNDR_HW_FTL_ERR",
    "async eq buffer overrun": "MLX5_HEALTH_SYNDR_ASYNC_EQ_OVERRUN_ERR",
    "eq error": "MLX5_HEALTH_SYNDR_EQ_ERR",
    "invalid eq referenced": "MLX5_HEALTH_SYNDR_EQ_INV",
    "invalid eq refrenced": "MLX5_HEALTH_SYNDR_EQ_INV",
    "ffser error": "MLX5_HEALTH_SYNDR_FFSER_ERR",
    "high temperature": "MLX5_HEALTH_SYNDR_HIGH_TEMP",
    "high temprature": "MLX5_HEALTH_SYNDR_HIGH_TEMP",
}
#: "Fatal error %u detected" -> sensor enum name
FATAL_SENSORS: dict[int, str] = {
    1: "MLX5_SENSOR_PCI_COMM_ERR",
    2: "MLX5_SENSOR_PCI_ERR",
    3: "MLX5_SENSOR_NIC_DISABLED",
    4: "MLX5_SENSOR_NIC_SW_RESET",
    5: "MLX5_SENSOR_FW_SYND_RFR",
}
#: mlx5 command outbox status (u8) -> enum name
MLX5_CMD_STATUS: dict[int, str] = {
    0x0: "MLX5_CMD_STAT_OK",
    0x1: "MLX5_CMD_STAT_INT_ERR",
    0x2: "MLX5_CMD_STAT_BAD_OP_ERR",
    0x3: "MLX5_CMD_STAT_BAD_PARAM_ERR",
    0x4: "MLX5_CMD_STAT_BAD_SYS_STATE_ERR",
    0x5: "MLX5_CMD_STAT_BAD_RES_ERR",
    0x6: "MLX5_CMD_STAT_RES_BUSY",
    0x8: "MLX5_CMD_STAT_LIM_ERR",
    0x9: "MLX5_CMD_STAT_BAD_RES_STATE_ERR",
    0xA: "MLX5_CMD_STAT_IX_ERR",
    0xF: "MLX5_CMD_STAT_NO_RES_ERR",
    0x10: "MLX5_CMD_STAT_BAD_QP_STATE_ERR",
    0x30: "MLX5_CMD_STAT_BAD_PKT_ERR",
    0x40: "MLX5_CMD_STAT_BAD_SIZE_OUTS_CQES_ERR",
    0x50: "MLX5_CMD_STAT_BAD_INP_LEN_ERR",
    0x51: "MLX5_CMD_STAT_BAD_OUTP_LEN_ERR",
    0xFE: "MLX5_DRIVER_STATUS_ABORTED",
}
#: mlx4 firmware command status -> enum name (mlx4/cmd.c)
MLX4_CMD_STATUS: dict[int, str] = {
    0x1: "CMD_STAT_INTERNAL_ERR",
    0x2: "CMD_STAT_BAD_OP",
    0x3: "CMD_STAT_BAD_PARAM",
    0x4: "CMD_STAT_BAD_SYS_STATE",
    0x5: "CMD_STAT_BAD_RESOURCE",
    0x6: "CMD_STAT_RESOURCE_BUSY",
    0x8: "CMD_STAT_EXCEED_LIM",
    0x9: "CMD_STAT_BAD_RES_STATE",
    0xA: "CMD_STAT_BAD_INDEX",
    0xB: "CMD_STAT_BAD_NVMEM",
    0xC: "CMD_STAT_ICM_ERROR",
    0x10: "CMD_STAT_BAD_QP_STATE",
    0x20: "CMD_STAT_BAD_SEG_PARAM",
    0x21: "CMD_STAT_REG_BOUND",
    0x22: "CMD_STAT_LAM_NOT_PRE",
    0x30: "CMD_STAT_BAD_PKT",
    0x40: "CMD_STAT_BAD_SIZE",
    0x50: "CMD_STAT_MULTI_FUNC_REQ",
}
#: What a failed firmware command says, by its status (the errno the kernel turns it into:
#: mlx5 core cmd.c cmd_status_to_err(), the same table in rdma-core providers/mlx5 vfio;
#: mlx4 cmd.c mlx4_status_to_errno() and the status comments of its enum): ``rejected`` --
#: the firmware refused the request as invalid for this device or its state (mlx5 -EINVAL;
#: mlx4 BAD_OP -EPERM, BAD_PARAM/BAD_QP_STATE/BAD_PKT -EINVAL, BAD_RESOURCE/BAD_INDEX -EBADF,
#: ...: an unsupported opcode, op_mod, register or parameter; the issuer's matter -- a driver
#: feature, a tool, a health agent's query), not a fault of the device; ``resources`` -- out
#: of HCA resources or busy (-ENOMEM, -EAGAIN, -EBUSY, mlx4 ICM pages -ENFILE); ``device`` --
#: the firmware failed it (-EIO: internal error, bad system state, bad input/output length;
#: mlx4 corrupted firmware image BAD_NVMEM, local memory not present). ACCESS_REG's bad system state is "register not supported"
#: (mstflint translate_cmd_status_to_reg_status: ME_REG_ACCESS_REG_NOT_SUPP): rejected.
CMD_STATUS_CLASS: dict[str, str] = {
    "MLX5_CMD_STAT_INT_ERR": "device", "MLX5_CMD_STAT_BAD_OP_ERR": "rejected",
    "MLX5_CMD_STAT_BAD_PARAM_ERR": "rejected", "MLX5_CMD_STAT_BAD_SYS_STATE_ERR": "device",
    "MLX5_CMD_STAT_BAD_RES_ERR": "rejected", "MLX5_CMD_STAT_RES_BUSY": "resources",
    "MLX5_CMD_STAT_LIM_ERR": "resources", "MLX5_CMD_STAT_BAD_RES_STATE_ERR": "rejected",
    "MLX5_CMD_STAT_IX_ERR": "rejected", "MLX5_CMD_STAT_NO_RES_ERR": "resources",
    "MLX5_CMD_STAT_BAD_QP_STATE_ERR": "rejected", "MLX5_CMD_STAT_BAD_PKT_ERR": "rejected",
    "MLX5_CMD_STAT_BAD_SIZE_OUTS_CQES_ERR": "rejected", "MLX5_CMD_STAT_BAD_INP_LEN_ERR": "device",
    "MLX5_CMD_STAT_BAD_OUTP_LEN_ERR": "device",
    "CMD_STAT_INTERNAL_ERR": "device", "CMD_STAT_BAD_OP": "rejected", "CMD_STAT_BAD_PARAM": "rejected",
    "CMD_STAT_BAD_SYS_STATE": "device", "CMD_STAT_BAD_RESOURCE": "rejected",
    "CMD_STAT_RESOURCE_BUSY": "resources", "CMD_STAT_EXCEED_LIM": "resources",
    "CMD_STAT_BAD_RES_STATE": "rejected", "CMD_STAT_BAD_INDEX": "rejected", "CMD_STAT_BAD_NVMEM": "device",
    "CMD_STAT_ICM_ERROR": "resources", "CMD_STAT_BAD_QP_STATE": "rejected", "CMD_STAT_BAD_SEG_PARAM": "rejected",
    "CMD_STAT_REG_BOUND": "rejected", "CMD_STAT_LAM_NOT_PRE": "device", "CMD_STAT_BAD_PKT": "rejected",
    "CMD_STAT_BAD_SIZE": "rejected", "CMD_STAT_MULTI_FUNC_REQ": "rejected",
}
#: port module event error text (lower case, spaces removed) -> enum name
MODULE_ERRORS: dict[str, str] = {
    "powerbudgetexceeded": "MLX5_MODULE_EVENT_ERROR_POWER_BUDGET_EXCEEDED",
    "longrangefornonmlnxcable": "MLX5_MODULE_EVENT_ERROR_LONG_RANGE_FOR_NON_MLNX",
    "busstuck(i2cordatashorted)": "MLX5_MODULE_EVENT_ERROR_BUS_STUCK",
    "noeeprom/retrytimeout": "MLX5_MODULE_EVENT_ERROR_NO_EEPROM_RETRY_TIMEOUT",
    "enforcepartnumberlist": "MLX5_MODULE_EVENT_ERROR_ENFORCE_PART_NUMBER_LIST",
    "unknownidentifier": "MLX5_MODULE_EVENT_ERROR_UNKNOWN_IDENTIFIER",
    "hightemperature": "MLX5_MODULE_EVENT_ERROR_HIGH_TEMPERATURE",
    "badorshortedcable/module": "MLX5_MODULE_EVENT_ERROR_BAD_CABLE",
    "oneormorenetworkportshavebeenpowereddownduetoinsufficient/unadvertisedpoweronthepcieslot":
        "MLX5_MODULE_EVENT_ERROR_PCIE_POWER_SLOT_EXCEEDED",
}
_MODULE_STATUS = {"cable plugged": "plugged", "cable unplugged": "unplugged",
                  "cable error": "error", "cable disabled": "disabled"}
#: error CQE syndrome -> (enum name, ibv_wc_status name), rdma-core providers/mlx5
CQE_SYNDROMES: dict[int, tuple[str, str]] = {
    0x01: ("MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR", "IBV_WC_LOC_LEN_ERR"),
    0x02: ("MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR", "IBV_WC_LOC_QP_OP_ERR"),
    0x04: ("MLX5_CQE_SYNDROME_LOCAL_PROT_ERR", "IBV_WC_LOC_PROT_ERR"),
    0x05: ("MLX5_CQE_SYNDROME_WR_FLUSH_ERR", "IBV_WC_WR_FLUSH_ERR"),
    0x06: ("MLX5_CQE_SYNDROME_MW_BIND_ERR", "IBV_WC_MW_BIND_ERR"),
    0x10: ("MLX5_CQE_SYNDROME_BAD_RESP_ERR", "IBV_WC_BAD_RESP_ERR"),
    0x11: ("MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR", "IBV_WC_LOC_ACCESS_ERR"),
    0x12: ("MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR", "IBV_WC_REM_INV_REQ_ERR"),
    0x13: ("MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR", "IBV_WC_REM_ACCESS_ERR"),
    0x14: ("MLX5_CQE_SYNDROME_REMOTE_OP_ERR", "IBV_WC_REM_OP_ERR"),
    0x15: ("MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR", "IBV_WC_RETRY_EXC_ERR"),
    0x16: ("MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR", "IBV_WC_RNR_RETRY_EXC_ERR"),
    0x22: ("MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR", "IBV_WC_REM_ABORT_ERR"),
}

_HEX_ROW = re.compile(r"^\s*([0-9a-f]{8}) ([0-9a-f]{8}) ([0-9a-f]{8}) ([0-9a-f]{8})\s*$", re.M)


@hook("mlx5_health")
def mlx5_health(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """A health-poller line of mlx5_core health.c -> ``nic.health`` with ``code``.

    ``syndrome`` (int, from ``synd 0x1: ...``) or ``synd_text`` (``Health issue observed,
    <text>, ...``) become ``code`` = ``MLX5_HEALTH_SYNDR_*`` (``syndrome`` kept, ``synd_text``
    dropped); ``sensor`` (``Fatal error 1 detected``) becomes ``code`` = ``MLX5_SENSOR_*``.
    A line that names neither keeps the rule's constant ``code``. ``severity`` is upper-cased."""
    a = draft.attributes
    synd = a.get("syndrome")
    text = str(a.pop("synd_text", "") or "").strip().rstrip(",").lower()
    if isinstance(synd, int):
        a["code"] = HEALTH_SYNDROMES.get(synd, f"MLX5_HEALTH_SYNDR_0x{synd:x}")
    elif text:
        a["code"] = HEALTH_SYNDROME_TEXT.get(text, "MLX5_HEALTH_SYNDR_UNRECOGNIZED")
    sensor = a.pop("sensor", None)
    if isinstance(sensor, int):
        a["code"] = FATAL_SENSORS.get(sensor, f"MLX5_SENSOR_{sensor}")
        a["sensor"] = sensor
    if "severity" in a:
        a["severity"] = str(a["severity"]).upper()
    return [draft]


@hook("mlx5_cmd_error")
def mlx5_cmd_error(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """A firmware command failure -> ``nic.cmd_error``.

    ``status_code`` (int) becomes ``code`` = ``MLX5_CMD_STAT_*`` (mlx5) or ``CMD_STAT_*``
    (``driver: mlx4_core``); a timeout line keeps the rule's constant ``code``/``kind``. The
    faked ``MLX5_DRIVER_STATUS_ABORTED`` (device already in error state) gets
    ``kind: aborted``; any other status gets ``status_class`` (:data:`CMD_STATUS_CLASS`:
    rejected, resources, device)."""
    a = draft.attributes
    st = a.get("status_code")
    if isinstance(st, int):
        table = MLX4_CMD_STATUS if str(a.get("driver", "")).startswith("mlx4") else MLX5_CMD_STATUS
        a["code"] = table.get(st, f"status_0x{st:x}")
        if st == 0xFE and table is MLX5_CMD_STATUS:
            a["kind"] = "aborted"
        else:
            cls = CMD_STATUS_CLASS.get(a["code"], "device")
            if a.get("command") == "ACCESS_REG" and a["code"] == "MLX5_CMD_STAT_BAD_SYS_STATE_ERR":
                cls = "rejected"
            a["status_class"] = cls
    if "status" in a:
        a["status"] = str(a["status"]).strip()
    return [draft]


@hook("mlx5_module_event")
def mlx5_module_event(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """``Port module event[error]: module 0, Cable error, High Temperature`` -> ``status``
    (plugged / unplugged / error / disabled) and, for errors, ``error`` (text) and ``code``
    (``MLX5_MODULE_EVENT_ERROR_*``). ``event`` stays the whole text after the module number
    (the fabric correlator reads "unplug" in it)."""
    a = draft.attributes
    ev = str(a.get("event", "")).strip()
    head, _, rest = ev.partition(",")
    status = _MODULE_STATUS.get(head.strip().lower())
    if status:
        a["status"] = status
    if rest.strip():
        err = rest.strip()
        a["error"] = err
        a["code"] = MODULE_ERRORS.get(re.sub(r"\s+", "", err.lower()).rstrip("."), "MLX5_MODULE_EVENT_ERROR_UNKNOWN")
    elif status == "unplugged":
        a["code"] = "MLX5_MODULE_STATUS_UNPLUGGED"
    elif status == "plugged":
        a["code"] = "MLX5_MODULE_STATUS_PLUGGED"
    elif status == "disabled":
        a["code"] = "MLX5_MODULE_STATUS_DISABLED"
    return [draft]


@hook("mlx5_error_cqe")
def mlx5_error_cqe(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """An error CQE report -> ``rdma.completion_error``.

    mlx5e (``Error cqe on cqn ..., syndrome 0x1, vendor syndrome 0x68``) carries the syndrome
    on the line. libmlx5's ``mlx5: <host>: got completion with error:`` carries it in the four
    hex rows printed after it (``struct mlx5_err_cqe``: row 4, word 2 = ``.. .. vendor_err
    syndrome``); when those rows are in the same record they are decoded. ``code`` =
    ``MLX5_CQE_SYNDROME_*``, ``status`` = the ``IBV_WC_*`` the provider reports."""
    a = draft.attributes
    body = obs.body or ""
    if "syndrome" not in a and match is not None:
        rows = _HEX_ROW.findall(body, match.end())
        if len(rows) >= 4:
            word = int(rows[3][1], 16)
            a["syndrome"] = word & 0xFF
            a["vendor_err"] = (word >> 8) & 0xFF
            qpn = int(rows[3][2], 16)
            a["qpn"] = qpn & 0xFFFFFF
    synd = a.get("syndrome")
    if isinstance(synd, int):
        name, wc = CQE_SYNDROMES.get(synd, (f"MLX5_CQE_SYNDROME_0x{synd:x}", "IBV_WC_GENERAL_ERR"))
        a["code"], a["status"] = name, wc
    return [draft]


_DOWN_WORDS = {"down", "lost", "disconnected", "definitely down"}
_UP_WORDS = {"up", "gained", "connected", "definitely up"}


@hook("host_link_state")
def host_link_state(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """A host-side link line (netdev drivers, bonding, systemd-networkd, NetworkManager) ->
    ``fabric.link_down`` / ``fabric.link_up`` by its ``state`` word (down / Lost / disconnected
    -> DOWN; up / Gained / connected -> UP). ``netdev2`` (bonding's older "for interface X")
    becomes ``netdev``; ``side: host``. An unknown word drops the match."""
    a = draft.attributes
    if "netdev2" in a:
        a.setdefault("netdev", a.pop("netdev2"))
    if "netdev" not in a and "bond" in a:
        a["netdev"] = a["bond"]  # bonding's "now running without any active interface": the bond itself
    word = str(a.get("state", "")).strip().lower()
    if word in _DOWN_WORDS:
        draft.type, a["state"] = "fabric.link_down", "DOWN"
    elif word in _UP_WORDS:
        draft.type, a["state"] = "fabric.link_up", "UP"
    else:
        return []
    a["side"] = "host"
    return [draft]


#: opensm / IBA generic trap numbers this pack turns into events (IBA 14.2.5.1, opensm ib_get_trap_str)
OPENSM_PORT_ERROR_TRAPS = {129: "local_link_integrity", 130: "excessive_buffer_overrun",
                           131: "flow_control_update_watchdog"}


@hook("opensm_trap")
def opensm_trap(draft: Draft, match: re.Match[str] | None, obs: Observation, rule: Rule) -> list[Draft]:
    """opensm ``Received Generic Notice type:1 num:<trap> (...)`` -> trap 128 (link state
    change of a port of the producer) ``fabric.port_state`` with ``state: CHANGED``; traps
    129/130/131 (local link integrity / excessive buffer overrun / flow-control watchdog
    thresholds, which name the port) ``fabric.port_errors`` with ``error``; other traps (GID
    in/out of service, capability changes, bad keys) are dropped. ``side: switch`` when the
    producer is a switch, else ``host``; ``lid`` is the producer's LID."""
    a = draft.attributes
    trap = a.get("trap")
    producer = str(a.get("producer", "")).strip()
    a["side"] = "switch" if producer.lower() == "switch" else "host"
    if trap == 128:
        draft.type = "fabric.port_state"
        a["state"] = "CHANGED"
    elif trap in OPENSM_PORT_ERROR_TRAPS:
        draft.type = "fabric.port_errors"
        a["error"] = OPENSM_PORT_ERROR_TRAPS[trap]
    else:
        return []
    return [draft]
