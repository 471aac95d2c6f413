"""The event-type vocabulary: every ``Event.type`` a rule may emit, with its attributes.

Extraction rules (``correlators/rules/*.yaml``) may only emit types listed here, and the causal
rules (``correlators/causal.yaml``) may only name types listed here; the rule-pack loader checks
both. Attribute names are the keys an event of that type carries in ``Event.attributes``
(optional unless a rule's examples show otherwise). Units are in the names: ``*_ms``
milliseconds, ``*_s`` seconds.
"""

from __future__ import annotations

EVENT_TYPES: dict[str, str] = {
    # --- GPU (driver log, NVIDIA XID catalog) ---------------------------------------------
    "gpu.xid": "NVRM Xid line. attrs: xid, mnemonic, description, immediate_action, "
    "investigatory_action, pid, process, caused_by_xid (XID 45), recovery_action (XID 154), "
    "detail; gpu.pci_bus_id",
    "gpu.fell_off_bus": "GPU has fallen off the bus, the multi-line message without an XID "
    "number (same class as XID 79). gpu.pci_bus_id",
    "gpu.sxid": "NVSwitch SXID line. attrs: sxid, severity (fatal|non-fatal), link, detail",
    "pcie.aer_corrected": "PCIe AER corrected error. attrs: device, error, error_type",
    "pcie.aer_uncorrected": "PCIe AER uncorrected error. attrs: device, error (Surprise Down "
    "Error, Completion Timeout, ...), fatal (bool), error_type",
    "telemetry.ecc_uncorrected": "uncorrectable ECC count > 0 in telemetry. attrs: count",
    "telemetry.ecc_corrected": "correctable ECC count > 0 in telemetry. attrs: count",
    "telemetry.remapped_rows": "row remapping pending/failed or uncorrectable remapped rows. "
    "attrs: uncorrectable, pending, failure",
    "telemetry.thermal_slowdown": "HW (thermal) slowdown active. attrs: reason",
    "telemetry.power_brake": "HW power brake slowdown active",
    "telemetry.sw_power_cap": "SW power cap active (not a fault; context)",
    "telemetry.pcie_replay": "PCIe replay counter > 0. attrs: count",
    # --- NCCL / PyTorch / gloo --------------------------------------------------------------
    "nccl.watchdog_timeout": "PyTorch ProcessGroupNCCL watchdog timeout. attrs: seq_num, "
    "op_type, timeout_ms, ran_for_ms, pg; began_at = at - ran_for_ms",
    "nccl.work_progress": "'last enqueued / last completed' work. attrs: last_enqueued, "
    "last_completed",
    "nccl.heartbeat_timeout": "heartbeat monitor timed out / watchdog stuck. attrs: stuck_s",
    "nccl.remote_error": "ncclRemoteError. attrs: last_error",
    "nccl.system_error": "ncclSystemError / unhandled system error. attrs: last_error",
    "nccl.internal_error": "ncclInternalError. attrs: last_error",
    "nccl.invalid_usage": "ncclInvalidUsage. attrs: last_error",
    "nccl.ib_completion_error": "NET/IB completion with error. attrs: error_code, opcode, "
    "vendor_err, status; peer",
    "nccl.ib_async_event": "NET/IB async event (port error). attrs: event, device",
    "net.connection_reset": "socket reset/closed by peer or broken pipe. attrs: reason "
    "(reset|closed|broken_pipe), backend (nccl|gloo|socket); peer",
    "config.shm_alloc_failed": "/dev/shm too small: posix_fallocate / shared memory segment "
    "creation failed. attrs: size",
    "config.duplicate_gpu": "NCCL 'Duplicate GPU detected'. attrs: ranks, device",
    "config.no_socket_interface": "NCCL bootstrap found no socket interface (bad "
    "NCCL_SOCKET_IFNAME)",
    "config.acs_enabled": "PCIe ACS redirect enabled (breaks GPUDirect RDMA)",
    "cuda.error": "CUDA error in an application. attrs: error (illegal_address|"
    "device_assert|out_of_memory|launch_failed|misaligned_address|other), text",
    "gloo.timeout": "gloo collective timed out. attrs: timeout_ms",
    "rdzv.timeout": "rendezvous timed out. attrs: joined, expected",
    "torchrun.child_failed": "one entry of a torchrun ChildFailedError summary. attrs: "
    "global_rank, local_rank, exitcode, signal, pid, first_observed (bool)",
    "torchrun.closing_signal": "torchrun sent a closing signal to its own child. attrs: pid, "
    "signal",
    # --- host -------------------------------------------------------------------------------
    "host.oom_kill": "kernel OOM killer. attrs: pid, process",
    "proc.killed": "a process killed by a signal. attrs: pid, signal, signal_name, "
    "local_rank",
    "host.hard_lockup": "kernel hard/soft lockup. attrs: cpu, kind",
    "host.kernel_oops": "kernel oops / general protection fault / BUG. attrs: detail",
    "fabric.link_down": "a link went down. Host side (mlx5/NIC driver): device, netdev, driver. "
    "Switch side (Onyx, Cumulus, SONiC, UFM lines): port (topology switch_port form: IB port "
    "number '17', Ethernet name as printed 'Ethernet48'/'swp12'/'Eth1/12'), interface (as "
    "printed), state (DOWN), side='switch', from_state (SONiC)",
    "fabric.link_up": "a link came up; attributes as fabric.link_down (state UP)",
    "fabric.module_event": "port module event: cable plugged/unplugged. attrs: device, event",
    "fabric.port_state": "a port state reading or change. Host side (ibv_devinfo, ibstatus, "
    "ibstat): state (PORT_ACTIVE / ACTIVE, DOWN, INIT, ARMED), device, port (int), "
    "side='host'. Switch side: state (INIT, ARMED, ...), port, interface, side='switch'",
    "fabric.port_errors": "error counters of a port increased (connectors.counters delta). "
    "attrs: deltas ({counter: increase}, canonical sysfs names), interval_s, reset, saturated, "
    "port, node, side; fabric_port '<node>/<port>'",
    "fabric.port_fault": "derived by the fabric correlator: one cable's fault episode (flapping, "
    "link_down, degrading, port_errors). attrs: kind, incident_id, culprit_hosts, ports, switch, "
    "switch_port, hca, host_port, downs, counters",
    "fabric.switch_fault": "derived by the fabric correlator: several ports of one switch down "
    "together. attrs: incident_id, culprit_hosts ([switch]), ports, victims",
    "host.rack_fault": "derived by the fabric correlator: the hosts of one failure domain lost "
    "together (power). attrs: incident_id, culprit_hosts, ports",
    # --- scheduler --------------------------------------------------------------------------
    "sched.job_state": "scheduler job state. attrs: state, job_id, exit_code, reason",
    "sched.node_state": "node DOWN/DRAIN/FAIL with reason. attrs: node, state, reason",
    "sched.step_cancelled": "job step cancelled. attrs: step, reason",
    "sched.prolog_epilog_error": "prolog/epilog/SPANK plugin error on a node. attrs: detail",
    # --- cuda / nvml / nvidia-smi / device plugin (vocabulary issue 9) ---
    # --- nccl library (vocabulary issue 9) ---
    # --- pytorch / gloo / elastic (vocabulary issue 9) ---
    # --- linux kernel / python errno (vocabulary issue 9) ---
    # --- nvidia driver / nvswitch / fabric manager (vocabulary issue 9) ---
    # --- mlx5 / rdma-core / switches (vocabulary issue 9) ---
    # --- slurm / kubernetes / kueue / dcgm (vocabulary issue 9) ---
    # --- unrecognised (vocabulary issue 9) ---
    "log.unrecognised": "a record at error severity that no rule matched "
    "(correlators/unrecognised.py). attrs: severity (nccl_warn|glog_error|kernel_err|"
    "level_error|exception|failure), text (the error line, truncated to 400 chars)",
}
