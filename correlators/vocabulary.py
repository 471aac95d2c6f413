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
    "detail, gpu_instance and compute_instance (MIG), link (XID 74, 144-150), nvlink_unit and "
    "nvlink_severity (144-150), rpc_function, rpc_function_id and timeout_s (119/120); "
    "gpu.pci_bus_id",
    "gpu.fell_off_bus": "GPU has fallen off the bus, the multi-line message without an XID "
    "number (same class as XID 79). gpu.pci_bus_id",
    "gpu.sxid": "NVSwitch SXID line. attrs: sxid, code (NVSWITCH_ERR_* name), severity "
    "(fatal|non-fatal|correctable), switch, device, engine_instance, subengine_instance, record "
    "(report|error_log|data), data, link, detail",
    "pcie.aer_corrected": "PCIe AER corrected error (bit line, header or status line). attrs: "
    "device, error, error_type, errors (decoded status bits), agent, multiple (bool), stage",
    "pcie.aer_uncorrected": "PCIe AER uncorrected error. attrs: device, error (Surprise Down "
    "Error, Completion Timeout, ...), fatal (bool), error_type, errors, agent, multiple, stage",
    "telemetry.ecc_uncorrected": "uncorrectable ECC count > 0 in telemetry. attrs: count",
    "telemetry.ecc_corrected": "correctable ECC count > 0 in telemetry. attrs: count",
    "telemetry.remapped_rows": "row remapping pending/failed or uncorrectable remapped rows. "
    "attrs: uncorrectable, pending, failure",
    "telemetry.thermal_slowdown": "HW (thermal) slowdown active. attrs: reason",
    "telemetry.pcie_downtrained": "a GPU's PCIe link runs below its maximum (telemetry). attrs: "
    "dimension (width|generation), width, width_max, gen, gen_max",
    # --- training performance (correlators/rules/perf.yaml; correlators/stragglers.py) -----
    "perf.step_time": "a trainer's time for one step or one timed section. attrs: framework "
    "(megatron|nemo|deepspeed|lightning|hf_trainer|torchtitan), metric (what was timed: "
    "iteration, train_step_timing, forward-backward, fwd, bwd, step, ...), seconds, step "
    "(iteration number when printed), scope (job: one rank prints the job's time; rank: the "
    "rank's own time)",
    "perf.throughput": "a trainer's rate for one step or a running window. attrs: framework, "
    "metric (it_s, tps, wps, samples_per_s, tflops), rate (per second), step, scope",
    "perf.gpu_score": "NVIDIA Resiliency Extension straggler report: one rank's GPU performance "
    "score (1.0 the best; lower is slower). attrs: score, node, report (relative|individual "
    "when the record holds its heading)",
    "perf.straggler_reported": "NVIDIA Resiliency Extension straggler warning naming ranks. "
    "attrs: kind (relative|individual), ranks (the printed set)",
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
    "cuda.error": "CUDA runtime/driver error, whoever prints it (correlators/rules/cuda.yaml, "
    "cuda-errors.csv). attrs: error (short name: illegal_address, device_assert, out_of_memory, "
    "launch_failed, misaligned_address, ecc_uncorrectable, system_not_ready, ...), cuda_error "
    "(cudaErrorXxx), driver_error (CUDA_ERROR_XXX), cuda_errno, fault_class (gpu_hardware|"
    "gpu_software|config|app|unknown), printed_errno, emitter, site, nccl_transport, absurd_size, "
    "memory_fraction_limit, framing, text",
    "gloo.timeout": "gloo collective timed out. attrs: timeout_ms",
    "rdzv.timeout": "rendezvous timed out. attrs: joined, expected",
    "torchrun.child_failed": "one entry of a torchrun ChildFailedError summary. attrs: "
    "global_rank, local_rank, exitcode, signal, pid, first_observed (bool)",
    "torchrun.closing_signal": "torchrun sent a closing signal to its own child. attrs: pid, "
    "signal",
    # --- host -------------------------------------------------------------------------------
    "host.oom_kill": "a process killed for memory: kernel OOM killer (global or memcg), "
    "slurmstepd's cgroup report, Ray's memory monitor. attrs: pid, process, source "
    "(kernel|slurm|ray), cgroup (bool), constraint, step",
    "host.memory_pressure": "a host or cgroup memory reading (correlators/rules/memory.yaml), "
    "judged by the sigkill_memory_pressure detector. attrs: source (psi|cgroup_v2|cgroup_v1|"
    "oom_counter|meminfo|free|trainer); psi: kind (some|full), avg10, avg60, avg300 (%), "
    "total_us, scope (system|cgroup); counters (cumulative: true): low, high, max, oom, oom_kill, "
    "oom_group_kill, under_oom, failcnt; mem_total_bytes, mem_available_bytes (meminfo), "
    "available_pct (free), used_pct and used_gib (a trainer's psutil line)",
    "proc.killed": "a process killed by a signal. attrs: pid, signal, signal_name, "
    "local_rank, trap, object (the library of a segfault)",
    "host.hard_lockup": "kernel hard/soft lockup, RCU stall, workqueue lockup. attrs: cpu, kind "
    "(hard|soft|rcu_stall|workqueue), stuck_s, process, pid",
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
    # --- cuda / nvml / nvidia-smi / device plugin ---
    "cuda.library_error": "a CUDA library returned an error status (cuBLAS, cuDNN, cuFFT, "
    "cuSOLVER, cuSPARSE, cuRAND). attrs: library (cublas|cudnn|...), status (enum name, "
    "CUBLAS_STATUS_EXECUTION_FAILED), error (execution_failed|out_of_memory|not_initialized|"
    "internal_error|arch_mismatch|...), fault_class (app|config), call (the library call)",
    "nvml.error": "an NVML call failed (nvidia-smi, go-nvml clients, pynvml). attrs: nvml_error "
    "(NVML_ERROR_GPU_IS_LOST, ...; 'none' for nvidia-smi's 'No devices were found', "
    "'unrecognised' for an unknown text), nvml_errno (int), error (gpu_is_lost|driver_mismatch|"
    "driver_not_loaded|unknown|no_devices|no_permission|...), scope (init: nvmlInit; device: a "
    "device handle; python: a pynvml exception), text; gpu.pci_bus_id when the line names one",
    "gpu.unhealthy": "the Kubernetes device plugin marked a GPU unhealthy. attrs: reason (xid|"
    "nvml_error|marked), xid (int), device (GPU/MIG UUID), all_devices (bool), nvml_error, "
    "error, resource ('nvidia.com/gpu'), source (k8s-device-plugin)",
    # --- nccl library ---
    # Reused types carry more attributes from nccl.yaml: nccl.remote_error / system_error /
    # internal_error / invalid_usage also result (ncclResult_t name), site (file:line of the
    # framework's check), nccl_version, framing (pytorch|xla|nccl_tests|cupy);
    # nccl.ib_completion_error also req_size, direction (send|recv|iput|...), local_gid,
    # remote_gid, device; nccl.ib_async_event also fatal (bool, NCCL 2.23+ classification),
    # ibv_event (IBV_EVENT_*), object (CQ|QP|SRQ), port, event_num; config.no_socket_interface
    # also which (bootstrap|bootstrap_listen|oob|net_socket); config.shm_alloc_failed also op,
    # error, errno; fabric.port_state also from NCCL's "port active" async event.
    "nccl.error": "an NCCL result code without a type of its own (ncclUnhandledCudaError, "
    "ncclInvalidArgument, ncclInProgress, ncclTimeout, unknown) as PyTorch / XLA / nccl-tests / "
    "cupy print it. attrs: result (enum name), last_error (ncclGetLastError text), site, "
    "nccl_version, framing",
    "nccl.warn": "an NCCL WARN line no specific rule knows (a symptom), or an informational NET/IB "
    "async event / proxy failure. attrs: site (file:line as printed), file, line (int), func, "
    "text, subsystem (NET/IB, NET/OFI, ...), kind (ib_async_info|proxy_op), result, retcode",
    "nccl.ib_error": "NET/IB transport or verbs failure other than a completion error: ibv_* / "
    "mlx5dv_* call failed, device open/query failed, incompatible NICs, fatal comm error. attrs: "
    "kind (verbs_call|open_device|query_device|query_port|no_ip_interface|incompatible_devices|"
    "roce_version|comm_fatal|devices_failed), call, error (strerror), errno (ENOMEM, ...), "
    "errno_num, device, site, text",
    "nccl.socket_error": "NCCL socket connect/accept/recv/send failure other than reset/closed "
    "(connection refused, timed out, no route, retries exhausted). attrs: op (connect|accept|"
    "recv|send), error, errno, retries, func, ret; peer",
    "nccl.bootstrap_error": "NCCL bootstrap failure. attrs: kind (message_truncated|"
    "root_mismatch|rank_checked_in_twice|unexpected_connections|invalid_comm_id|"
    "comm_id_conflict), detail, site, text",
    "nccl.nvls_error": "NVLS (NVLink SHARP multicast) / MNNVL setup failure. attrs: kind "
    "(multicast_bind|cuda_failure|mnnvl_imex|nvls_enable_conflict), cuda_error (int), error, "
    "size, clique_size, line, site, text",
    "nccl.topology_error": "NCCL topology / XML failure. attrs: kind (topo_file|graph_file|"
    "xml_parse|graph_version|nvlink_p2p_disabled), path, error, errno, detail, gpu_a, gpu_b, "
    "site, text",
    "nccl.channel_transport": "informational NCCL INFO 'Channel .. via NET/<transport>/<dev>"
    "[/GDRDMA]' (no fault; cross-host GDR asymmetry is for the lead). attrs: transport (IB|"
    "Socket|AWS Libfabric name), gdr (bool), shared (bool), net_dev, proxy_dev, direction "
    "(send|receive), src_rank, dst_rank, src_dev, dst_dev",
    "nccl.pg_init": "informational: a rank states its membership of a process group or NCCL "
    "communicator of two or more members (ProcessGroupNCCL 'initialization options: size: N, "
    "global rank: G' and 'created ncclComm_ 0x..', NCCL '[func ]comm 0x.. rank r nranks n ... "
    "- Init COMPLETE'); no fault. attrs: stage (pg_options|comm_created|comm_init), pg (the PG "
    "id as printed), pg_guid, pg_desc, pg_rank (rank inside the group), pg_size, comm, "
    "comm_id, cuda_dev, nvml_dev, bus_id, func, nccl_version; rank = the global rank",
    "config.memlock": "RDMA memory registration failed with ENOMEM: the locked-memory limit "
    "(ulimit -l / RLIMIT_MEMLOCK) is too low. attrs: call (ibv_reg_mr*), error, errno, plugin, "
    "rc",
    "config.net_plugin": "NCCL net plugin selection / use failed through configuration or a "
    "software version mismatch (NCCL_NET names no network, no NET plugin initialised, "
    "aws-ofi-nccl memory registration RC -22). attrs: kind (network_not_found|no_net_plugin|"
    "incompatible_version|ofi_mr_register), network, plugin, plugin_version, rc, errno, error",
    "config.version_skew": "ranks or components run mismatched library versions (NCCL "
    "'Mismatched NCCL version detected'). attrs: component, version_a, version_b, rank_a, rank_b",
    "stack.version": "a line stating a node's stack version (correlators/rules/stack.yaml). "
    "attrs: component (nccl|driver|cuda|kernel|hca_firmware|fabric_manager), version, device (HCA), "
    "reported_by (nvidia-smi|kernel_module, driver), built_for_cuda (nccl), nodename (uname)",
    "config.drift": "a node's stack version differs from the recipe baseline or from every other "
    "node of the workload (correlators/drift.py). attrs: component, expected (the constraint, "
    "e.g. '>= 570.124.06', or the others' version), found, basis (recipe|peers), recipe, device, "
    "mismatch (the NVML/driver mismatch event type seen on the host, when one is)",
    # --- pytorch / gloo / elastic ---
    # Reused types carry more attributes from torch.yaml: nccl.watchdog_timeout also numel_in,
    # numel_out, wrapped (bool: quoted inside another message); nccl.work_progress also
    # kind (timeout_report | failure_report | dump_signal | global_timeout | desync_report),
    # timeout_work, timeout_rank (the rank whose timeout triggered a dump; -1 = this rank),
    # lagging_ranks, state, collective_seq; nccl.heartbeat_timeout also work_queue_size;
    # gloo.timeout also op (recv|send|read|write|connect|pair_closed), peer; rdzv.timeout also
    # error, source; net.connection_reset (gloo) also reason refused|timeout|other, errno_text;
    # torchrun.closing_signal also forced (bool), launcher (torchrun|deepspeed);
    # proc.killed also source (torchrun|mp.spawn|deepspeed), process_index, exitcode.
    "store.timeout": "a c10d store (TCPStore) operation timed out: client connect, recv "
    "('Socket Timeout'), wait for keys, ncclUniqueId get. attrs: op (connect|recv|wait|get), "
    "reason=timeout, timeout_ms, key, waiting_rank, peer_rank (the rank waited on); peer "
    "host:port of the store",
    "store.error": "a c10d store (TCPStore) socket failed: server cannot listen "
    "(EADDRINUSE), connection closed ('failed to recv, got 0 bytes'), reset, refused. attrs: "
    "op (listen|connect|recv|get), reason (addr_in_use|closed|reset|refused|broken_pipe|"
    "no_route|dns|other), port, key, waiting_rank, peer_rank; peer host:port",
    "rdzv.error": "torch.distributed.elastic rendezvous failure other than a timeout. attrs: "
    "error (RendezvousClosedError|RendezvousConnectionError|RendezvousStateError|"
    "keep_alive_failed|shutdown_failed), error_type (the exception type a keep-alive or "
    "shutdown failed with), node, run_id, backend (c10d|etcd)",
    "nccl.comm_aborted": "PyTorch ProcessGroupNCCL gave up on a communicator: 'NCCL "
    "communicator was aborted on rank N', 'Process group watchdog thread terminated with "
    "exception: <reason>', 'Some NCCL operations have failed or timed out ... taking the "
    "entire process down'. attrs: stage (aborted|watchdog_exception|teardown), comm_rank, "
    "reason (the quoted failure text), reason_kind (cuda_error|nccl_error|timeout|other)",
    "proc.exited": "a worker process exited with a non-zero exit code or an exception, as its "
    "launcher reports it (torchrun 'failed (exitcode: 1)', mp.spawn 'process 0 terminated "
    "with exit code 1' / '-- Process 1 terminated with the following error:', DeepSpeed "
    "'exits with return code = 1', Ray 'The actor died unexpectedly'). attrs: exitcode, pid, "
    "local_rank, process_index, source (torchrun|mp.spawn|deepspeed|ray), reason "
    "(exit_code|exception|actor_died), exit_type (Ray)",
    "proc.signal_received": "a process reports that it received a signal (PyTorch Lightning "
    "'[rank: 0] Received SIGTERM: 15' / 'Bypassing SIGTERM: 15', torchelastic agent "
    "'Received Signals.SIGTERM death signal, shutting down workers'). attrs: signal, "
    "signal_name, source (lightning|torchelastic), action (received|bypassed|shutdown)",
    "torchrun.worker_group_failed": "the torchelastic agent saw its worker group fail and "
    "restarts it ('[default] Worker group FAILED. 3/3 attempts left; will restart worker "
    "group'). attrs: role, state (FAILED|UNHEALTHY), attempts_left, max_restarts",
    # --- linux kernel / python errno ---
    "pcie.link_down": "a PCIe link below a port went down: pciehp 'Slot(N): Link Down' / 'Card "
    "not present', or DPC containment. attrs: device (port BDF), slot, reason (link_down|"
    "card_not_present|dpc_containment), status, source_id, detail",
    "host.hung_task": "kernel hung-task report: a task blocked in D state. attrs: process, pid, "
    "blocked_s, blocked_on (nfs|lustre|gpu_driver|local_fs|block, from the call trace when in the "
    "record)",
    "host.kernel_panic": "Kernel panic - not syncing. attrs: reason (as printed), reason_kind "
    "(machine_check|hardware_error|hung_task|soft_lockup|hard_lockup|oom|init_killed|boot|oops|"
    "nmi|rcu_stall|sysrq|other), end_marker (bool)",
    "host.hardware_error": "machine check / firmware hardware error. attrs: source (mce|ghes), "
    "severity (corrected|uncorrected|fatal|recoverable|logged), corrected (bool), cpu, bank, "
    "status (int, IA32_MCi_STATUS), exception (bool), source_id (GHES), detail",
    "host.memory_error": "memory ECC error. attrs: source (edac|memory_failure), corrected "
    "(bool), kind (CE|UE), mc, count, location (DIMM label), detail, info, pfn, address",
    "net.tx_timeout": "NETDEV WATCHDOG: a NIC transmit queue timed out. attrs: netdev, driver, "
    "device (PCI BDF), queue, timeout_ms, cpu",
    "storage.io_error": "block or file-system I/O error. attrs: layer (block|buffer|ext4|xfs), "
    "device, error (block status name: I/O, critical medium, timeout, ...), op (READ|WRITE|...), "
    "sector, block, error_code (errno as the fs prints it), detail",
    "storage.fs_error": "file-system error / shutdown / corruption. attrs: fs (ext4|xfs|lustre), "
    "device, function, detail; Lustre: errno, errno_name, category, operation, server",
    "storage.server_unreachable": "network file system server unreachable. attrs: fs (nfs|"
    "lustre), server, state (not_responding|timed_out|lost|evicted), client, target, service",
    "os.error": "Python OSError with an errno ([Errno N]). attrs: errno (int), errno_name "
    "(EDQUOT, ENOSPC, ...), strerror, exception (OSError, FileExistsError, ...), path, category "
    "(storage|host|config|net|app|shm)",
    # --- nvidia driver / nvswitch / fabric manager ---
    "gpu.init_failed": "NVIDIA driver probe / adapter-init failure (NVRM). attrs: kind "
    "(rm_init_adapter|gsp_init|unsupported_gpu|invalid_bar|vbios|probe_failed|driver_conflict|"
    "no_gpu_found|api_mismatch|alloc_failed), status ('0x26:0xffff:1127'), init_status, rm_status, "
    "status_line (ints), minor (device minor), error (errno of a failed probe), devices (count), "
    "function, detail, client/pid/client_version/kernel_version (api_mismatch), pci_id, "
    "driver_version (unsupported_gpu), bar/size_mb/address (invalid_bar); gpu.pci_bus_id when printed",
    "gpu.peermem_error": "nvidia-peermem (GPUDirect RDMA) error. attrs: kind (invalid_context|"
    "client_register|p2p_error|load_failed), function, src_line, detail",
    "fm.error": "NVIDIA Fabric Manager error line (fabricmanager.log or its journal). attrs: kind "
    "(multicast_team|version_mismatch|nvswitch_query|nvswitch_fatal|nvswitch_nonfatal|"
    "nvlink_training|nvlink_error|fabric_degraded|gpu_registration|service_stopped|other), "
    "severity (error|critical|fatal), detail, code (NV_* status when printed), tid, time; an "
    "NVSwitch error report: sxid, fid, device (NVSwitch PCI id), physical_id, port",
    "gpu.nvlink_error": "NVLink / NVSwitch driver error that is not an Xid or SXid line: the GPU "
    "driver's NVLink code (NVRM: [GPU<n> ]knvlink...: ...), the nvlink core module "
    "(nvidia-nvlink: ...) or the NVSwitch driver (nvidia-nvswitch<n>: ...). attrs: kind "
    "(training|activation|shutdown|reset|discovery|link_mask|topology|degraded|registration|"
    "nvlink_core_init|nvswitch_init|nvswitch_interrupts|version_mismatch|other), component (rm|nvlink_core|nvswitch), "
    "function, rm_gpu (RM GPU instance), link, peer_gpu, peer_index, link_mask, status, reason, "
    "handled (the driver went on), switch, error, detail, kernel_version, user_version",
    # --- mlx5 / rdma-core / switches ---
    "nic.health": "NIC/HCA firmware health report (mlx5_core health.c poller, mlx4 catas). attrs: "
    "code (MLX5_HEALTH_SYNDR_* from the health buffer syndrome, MLX5_SENSOR_* from 'Fatal error N "
    "detected', or health_compromised / health_buffer / recovery_failed / recovery_started / "
    "pci_slot_unavailable / pci_reads_not_working / error_state_unload / fw_init_timeout / "
    "init_failed / MLX5_EVENT_TYPE_TEMP_WARN_EVENT / mlx4_internal_error), kind (syndrome | "
    "fatal | miss_count | health_buffer | recovery | init | temperature), syndrome (int), "
    "sensor (int), severity (EMERGENCY..DEBUG, 6.x), field/value (one health-buffer line), "
    "device (PCI function '0000:08:00.0'), driver",
    "nic.cmd_error": "a firmware command of the NIC driver failed or timed out (mlx5_core cmd.c, "
    "mlx4_core cmd.c). attrs: command (CREATE_MKEY, ACCESS_REG, ...), opcode (int), op_mod (int), "
    "status (text as printed), status_code (int), code (MLX5_CMD_STAT_* / mlx4 CMD_STAT_* / "
    "MLX5_DRIVER_STATUS_ABORTED, or timeout / canceled / no_completion), kind (status | timeout | "
    "aborted), syndrome (int), err (negative errno), device, driver",
    "nic.pcie_power": "mlx5_core MPEIN report: the PCIe slot gives the NIC too little power. "
    "attrs: status (insufficient), power_w (int), device, driver",
    "rdma.device_error": "rdma-core userspace cannot find or open an RDMA device or its "
    "provider. attrs: code (no_device | get_device_list_failed | sysfs_missing | "
    "driver_load_failed | no_userspace_driver | rlimit_memlock), driver (provider, e.g. "
    "'mlx5' / 'libmlx5-rdmav34.so'), device, detail, limit_bytes (rlimit_memlock)",
    "rdma.completion_error": "an error CQE reported by the mlx5 provider (libmlx5 'got "
    "completion with error' + hex dump) or the mlx5e/mlx5_ib kernel datapath. attrs: code "
    "(MLX5_CQE_SYNDROME_*), status (IBV_WC_*), syndrome (int), vendor_err (int), cqn, qn, qpn, "
    "opcode, netdev, source (libmlx5 | mlx5e | mlx5_ib)",
    # --- slurm / kubernetes / kueue / dcgm ---
    "sched.config_error": "scheduler-side configuration/launch failure on a node (slurmd gres.conf "
    "device file missing, node config differs from hardware, registration failed, execve failed, "
    "step creation refused). attrs: code (gres_file_missing|gres_conf_parse|node_config_differs|"
    "register_failed|execve_failed|step_create_failed), detail, file, errno, fatal (bool), program",
    "sched.task_exit": "srun task exit: tasks that exited non-zero or died by a signal (a symptom). "
    "attrs: tasks ('0-3'), exit_code, signal, signal_name, core (bool); host",
    "k8s.pod_terminated": "a container/pod terminated abnormally (kubectl describe, pod YAML/JSON, "
    "kubelet messages). attrs: reason (OOMKilled|Error|ContainerCannotRun|StartError|"
    "DeadlineExceeded|Evicted|NodeShutdown|...), exit_code, signal, resource (eviction), "
    "condition, message, last (bool: a lastState)",
    "k8s.event": "a Kubernetes event row that reports a failure (kubectl describe / get events). "
    "attrs: event_type (Warning|Normal), reason (FailedScheduling, Evicted, Preempted, OOMKilling, "
    "UnexpectedAdmissionError, NodeNotReady, FailedMount, BackOff, ...), source, object, age, "
    "message, resource",
    "k8s.node_condition": "an unhealthy node condition (Ready False/Unknown, a pressure or a "
    "problem-detector condition True). attrs: condition, status, reason, message",
    "k8s.gpu_capacity": "a node's allocatable GPUs below its capacity (devices marked unhealthy). "
    "attrs: resource (nvidia.com/gpu), capacity, allocatable, missing (ints)",
    "kueue.workload_condition": "a Kueue Workload condition/event message (eviction, preemption, "
    "deactivation). attrs: type (Evicted|Preempted|DeactivationTarget|...), status, reason "
    "(Preempted|PodsReadyTimeout|NodeFailures|MaximumExecutionTimeExceeded|"
    "RequeuingLimitExceeded|ClusterQueueStopped|Deactivated), preemption_reason, workload, "
    "nodes, message",
    "nvsentinel.health_event": "an unhealthy NVSentinel HealthEvent no other rule reads. attrs: agent, "
    "check (checkName), fatal (true|false), action (recommendedAction), codes (errorCode, comma-joined), "
    "component (componentClass), message",
    "dcgm.failure": "a DCGM diagnostic/health failure. attrs: fr_code (DCGM_FR_* name or unknown), "
    "fr_id, severity (ISOLATE|RESET|TRIAGE|CONFIG|MONITOR), category (HARDWARE_MEMORY, ...), "
    "fault_class (gpu_hardware|fabric|host|config|gpu_software|internal|unknown), test, status "
    "(fail|warn), entity, section, detail, source; gpu.index",
    # --- glibc ---
    "proc.heap_corruption": "glibc malloc integrity check or stack protector abort (the process "
    "gets SIGABRT). attrs: message (the check's text), process (older formats), library",
    "host.service_failed": "a systemd unit failed to start or exited with an error (a symptom: "
    "the unit's own log says why). attrs: unit, description, code, status, result",
    "app.exception": "an uncaught Python exception no specific rule recognised (the last line "
    "of a traceback). attrs: exception (qualified type), message, raised_in_source (the program's "
    "own raise statement)",
    # Any type: nccl_pid (int) on an event read from a line with NCCL's
    # "host:pid:tid [dev]" prefix; rank_from='pid' when correlators/pids.py gave a pid-bearing
    # event (host.oom_kill, gpu.xid, proc.*) its rank from what the allocation/logs state.
    # --- stack dumps (issue 33) ---
    "proc.stack": "one thread of a rank's stack dump (py-spy text/JSON, faulthandler, gdb, PyTorch "
    "flight recorder; correlators/stackdump.py). attrs: format, state (collective|dataloader|io|lock|"
    "other), main (the main thread), signature (state + the frame that says so), frame, function, file, "
    "op (the collective), frames (innermost first), depth, thread, thread_name, pid; flight recorder: "
    "seq_num, fr_state, last_seq, pg_id, pg_name, profiling_name",
    # --- unrecognised ---
    "log.unrecognised": "a record at error severity that no rule matched "
    "(correlators/unrecognised.py). attrs: severity (nccl_warn|glog_error|kernel_err|"
    "level_error|exception|failure), text (the error line, truncated to 400 chars)",
}
