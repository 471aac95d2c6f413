"""Vocabulary first, frames second: every vocabulary entry in every framing gives its event
(the framing matrix of correlators/rules/coverage.py), healthy look-alikes give nothing, frame
rules win over spots, and wrapped records are read as their emitter printed them."""

from __future__ import annotations

from collections import Counter

import orjson
import pytest

from correlators.rules import load_rule_pack
from correlators.rules.coverage import FRAMINGS, NEGATIVE_FRAMINGS, coverage_matrix, vocabulary_entries
from hypothesis import given, settings
from hypothesis import strategies as st

from correlators.rules.spotter import CONTEXT_LITERALS, NEGATIVE_CONTEXTS, Spotter, _may_match
from correlators.rules.unwrap import unwrap
from tests.correlators.test_rules import obs_for

PACK = load_rule_pack()
ENTRIES = vocabulary_entries()


def events(text):
    return PACK.extract(obs_for(text, host="node-a01"))


def test_every_vocabulary_is_compiled_from_its_table():
    count = Counter(e.vocabulary for e in ENTRIES)
    # cuda-errors.csv: runtime and driver names; the XID catalog; sxid-codes.csv; the DCGM codes
    # that report a fault; NVML's failing return codes; NCCL's error results
    assert count["cuda"] > 200 and count["cuda-text"] > 60
    assert count["xid"] >= 100 and count["sxid"] > 400
    assert count["dcgm"] > 100 and count["nvml"] >= 20 and count["nccl"] == 6


@pytest.mark.parametrize("vocabulary", sorted({e.vocabulary for e in ENTRIES}))
def test_framing_matrix_every_entry_in_every_framing(vocabulary):
    rows = coverage_matrix(PACK, [e for e in ENTRIES if e.vocabulary == vocabulary])
    misses = [(r.entry.name, r.misses) for r in rows if r.misses]
    wrong = [(r.entry.name, r.false_positives) for r in rows if r.false_positives]
    assert not misses, f"{len(misses)} entries missed in some framing, e.g. {misses[:3]}"
    assert not wrong, f"{len(wrong)} entries gave an event in a negative framing, e.g. {wrong[:3]}"
    assert all(len(r.hits) == len(FRAMINGS) for r in rows)


def test_the_framings_are_the_documented_list():
    assert list(FRAMINGS) == ["bare", "syslog-rfc3164", "syslog-rfc5424", "journald", "dmesg-raw", "dmesg-T",
                              "pdsh", "cri", "kubectl-prefix", "json", "python-exception", "python-logging",
                              "glog", "continuation"]
    assert set(NEGATIVE_FRAMINGS) == {"source-line", "comment", "option-help", "help-text", "skipped"}


# --- the kinds of line a frame-only pack missed -------------------------------------------------


def test_cuda_enum_on_the_continuation_line_of_an_application_message():
    got = events("my_kernel.cu:88: cudaMemcpyAsync failed with error 700\n"
                 "  cudaErrorIllegalAddress: an illegal memory access was encountered")
    assert [(e.type, e.attributes["error"], e.attributes["cuda_errno"]) for e in got] == [
        ("cuda.error", "illegal_address", 700)]


def test_a_cuda_description_alone_on_a_continuation_line():
    got = events("ERROR: the training step failed:\n    uncorrectable ECC error encountered")
    assert [(e.type, e.attributes["error"], e.attributes["frame"]) for e in got] == [
        ("cuda.error", "ecc_uncorrectable", "none")]


def test_xid_fragment_without_its_nvrm_prefix_with_the_nvlink5_subcode():
    got = events("node-a01 reported Xid (PCI:0000:9b:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 04 "
                 "(0x025001c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)")
    [e] = got
    assert (e.type, e.attributes["xid"], e.attributes["frame"], e.gpu.pci_bus_id) == ("gpu.xid", 149, "none", "0000:9b:00")
    assert e.attributes["nvlink_severity"] == "fatal" and e.attributes["link"] == 4
    assert e.attributes["mnemonic"] == "NVLINK_NETIR_ERROR"
    assert e.rule == "vocab.xid@1"


def test_an_xid_line_that_ends_at_the_code():
    [e] = events("Nov 30 01:20:31 node-a01 gpu-monitor[311]: GPU 0000:3b:00.0 Xid 79")
    assert (e.type, e.attributes["xid"], e.attributes["immediate_action"]) == ("gpu.xid", 79, "RESTART_BM")


def test_a_dcgm_message_reprinted_by_a_health_daemon():
    [e] = events('level=error msg="GPU 2 failed health check" code=DCGM_FR_VOLATILE_DBE_DETECTED '
                 'detail="Detected 2 volatile double-bit ECC error(s) in GPU 2."')
    assert (e.type, e.attributes["fr_code"], e.attributes["fault_class"]) == (
        "dcgm.failure", "DCGM_FR_VOLATILE_DBE_DETECTED", "gpu_hardware")


def test_a_dcgm_message_text_without_its_code_name():
    got = events("[nhc] check_gpu: Detected 12 volatile double-bit ECC error(s) in GPU 5.")
    assert [(e.type, e.attributes["fr_code"]) for e in got] == [("dcgm.failure", "DCGM_FR_VOLATILE_DBE_DETECTED")]


def test_the_device_plugin_xid_line_keeps_its_frame_event_and_is_not_spotted_twice():
    got = events("I0809 13:32:51.873541       1 health.go:185] XidCriticalError: Xid=94 on "
                 "Device=GPU-00000000-0000-0000-0000-000000000001; marking device as unhealthy.")
    assert [(e.type, e.attributes.get("xid"), "frame" in e.attributes) for e in got] == [("gpu.unhealthy", 94, False)]


def test_a_frame_rule_wins_over_the_spot_of_the_same_fact():
    got = events("[Mon Nov 30 01:21:04 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, "
                 "GPU has fallen off the bus.")
    assert [(e.type, e.rule) for e in got] == [("gpu.xid", "gpu.xid@3")]


# --- healthy look-alikes -------------------------------------------------------------------------

LOOKALIKES = [
    "I1130 01:20:31.299000       1 health.go:70] Ignoring the following XIDs for health checks: map[13:true 31:true 43:true]",
    "Nov 30 01:20:31 node-a01 gpu-monitor[311]: no Xid errors since boot",
    "kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001 caused by previous Xid 149",
    "Search for `cudaErrorAssert' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for more information.",
    "    if (err == cudaErrorIllegalAddress) {",
    "  # retry on CUDA_ERROR_LAUNCH_FAILED and Xid 79",
    '[rank1]:     if r == 1: raise RuntimeError("CUDA error: an illegal memory access was encountered (simulated in rank 1)")',
    "dcgm-exporter: skipping field DCGM_FR_VOLATILE_DBE_DETECTED on unsupported GPU",
    "  --xid-ignore LIST   Xid codes to leave alone, e.g. Xid 13, Xid 31",
    "temperature oxidation 79 C",
    "Xid 79 indicates the GPU has fallen off the bus; see the XID catalog",
    "cudaErrorIllegalAddress = 700: The device encountered a load or store instruction on an invalid memory address.",
    "DCGM_FR_VOLATILE_DBE_DETECTED = 1, // Detected 2 volatile double-bit ECC error(s) in GPU 3.",
    "NVML_ERROR_GPU_IS_LOST = 15 // The GPU has fallen off the bus or has otherwise become inaccessible",
    "  XID_FATAL = {48, 63, 64, 74, 79, 94, 95}  # Xid 79 means fallen off bus",
    "DCGM_HEALTH_WATCH_ALL=1 DCGM_FR_XID_ERROR=ignore",
    '$ dmesg | grep -i "Xid 79"',
    "dcgmi health -c: Healthy. No DCGM_FR_VOLATILE_DBE_DETECTED",
    "NVML_SUCCESS: device 0 healthy (no NVML_ERROR_GPU_IS_LOST)",
    "Recovered from Xid 79 on GPU 3 after reboot at 00:10; node returned to service",
    "test_cuda_errors.py::test_illegal_address[cudaErrorIllegalAddress] PASSED",
    "node-a01:2210:2210 [3] NCCL INFO failed to peer with device 5: peer access is not supported between these two devices",
    'time="2026-11-30T01:20:31Z" level=info msg="retrying after CUDA_ERROR_NOT_READY"',
]


@pytest.mark.parametrize("line", LOOKALIKES)
def test_healthy_lookalikes_give_no_vocabulary_event(line):
    got = [e for e in events(line) if e.type in ("gpu.xid", "cuda.error", "dcgm.failure", "nvml.error",
                                                 "nccl.system_error")]
    # the XID 45 line is its own frame event; the XID it names as its cause is not a new one
    assert [(e.type, e.attributes.get("xid")) for e in got] in ([], [("gpu.xid", 45)]), line


def test_every_negative_context_has_a_lookalike_it_rejects():
    spotter = Spotter()
    names = {name for name, *_ in NEGATIVE_CONTEXTS}
    rejected = set()
    for line in LOOKALIKES + ["-- see the manual: possible values such as Xid 79",
                              "dcgmi health: none of the xids seen (Xid 48 would need a reset)",
                              "NVRM: Xid (PCI:0000:dc:00): 45, Ch 00000001 caused by previous Xid 149",
                              "dcgm: level=info Xid 79 handler registered"]:
        for name, rx, read, _ in NEGATIVE_CONTEXTS:
            word = next((w for w in ("Xid", "cudaError", "CUDA_ERROR", "DCGM_FR_", "NVML_ERROR") if w in line), None)
            before = line[:line.rindex(word)] if word else line
            text = {"before": before, "from": line[len(before):]}.get(read, line)
            if rx.search(text):
                rejected.add(name)
    assert rejected == names, names - rejected
    assert spotter.spot("all good: Xid 79 seen on GPU 3")  # the plain word is still read


# --- wrapped records -----------------------------------------------------------------------------


@pytest.mark.parametrize("wrapped, inner", [
    ("2026-11-30T01:20:31.299000000Z stderr F [rank3]: RuntimeError: boom", "[rank3]: RuntimeError: boom"),
    ("[pod/trainer-0/main] node-a01:4107:4160 [0] NCCL WARN x", "node-a01:4107:4160 [0] NCCL WARN x"),
    ("node-a01: [ 9812.3] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, x", "[ 9812.3] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, x"),
    (orjson.dumps({"log": "[rank2]: ncclSystemError: x\n", "stream": "stderr"}).decode(), "[rank2]: ncclSystemError: x"),
    ("2026-11-30T01:20:31.1Z stdout F " + orjson.dumps({"msg": "E1130 f.cc:1] x"}).decode(), "E1130 f.cc:1] x"),
])
def test_unwrap_removes_collector_wrappers(wrapped, inner):
    assert unwrap(wrapped) == inner


@pytest.mark.parametrize("line", [
    "torch.distributed.DistBackendError: NCCL error in: x",
    "rank0: NCCL WARN x",
    "RuntimeError: CUDA error: out of memory",
    "{not json}",
    '{"level": "error"}',
])
def test_unwrap_leaves_other_prefixes_alone(line):
    assert unwrap(line) is line


def test_a_json_line_is_read_with_its_nested_message_and_the_fields_beside_it():
    nested = orjson.dumps({"date": 1.7e9, "log": {"message": "RuntimeError: CUDA error: an illegal memory access "
                           "was encountered"}, "kubernetes": {"pod_name": "trainer-0"}}).decode()
    assert unwrap(nested) == "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert [e.attributes["error"] for e in events(nested) if e.type == "cuda.error"] == ["illegal_address"]
    beside = orjson.dumps({"level": "error", "msg": "gpu check", "error": "NVML_ERROR_GPU_IS_LOST"}).decode()
    assert unwrap(beside) == "gpu check\nlevel=error error=NVML_ERROR_GPU_IS_LOST"
    assert [e.attributes["error"] for e in events(beside) if e.type == "nvml.error"] == ["gpu_is_lost"]


def test_a_rank_prefix_inside_a_cri_line_names_the_rank():
    [e] = [e for e in events("2026-11-30T01:20:31.299000000Z stderr F [rank3]: RuntimeError: CUDA error: "
                             "an illegal memory access was encountered") if e.type == "cuda.error"]
    assert (e.rank, e.attributes["error"]) == (3, "illegal_address")


_TOKENS = [w for words, _ in CONTEXT_LITERALS.values() for w in words] + [
    w.upper() for words, _ in CONTEXT_LITERALS.values() for w in words] + [
    " ", "  ", "\t", "x", "Xid 79", "7", "(", ")", ".", ";", ":", "-", "_", "a", "an", "the", "ſkip", "İgnored", "ı"]


@settings(max_examples=3000, deadline=None)
@given(st.lists(st.sampled_from(_TOKENS), max_size=12).map("".join))
@pytest.mark.slow
def test_context_literals_never_hide_a_match(text):
    # a text the literal test turns away is one the context's pattern does not match
    for name, rx, _, _ in NEGATIVE_CONTEXTS:
        if rx.search(text):
            assert _may_match(name, text), (name, text)


_SPOTTER = Spotter()
_ANCHOR_TOKENS = ["Xid", "XID", "xid", "SXid", "sxid", "DCGM_FR_", "dcgm_fr_", "NVML_ERROR_", "ncclSystemError",
                  "NCCLSYSTEMERROR", "cudaErrorIllegalAddress", "CUDAERRORILLEGALADDRESS", "CUDA_ERROR_ILLEGAL_ADDRESS",
                  "an illegal memory access was encountered", "An Illegal Memory Access Was Encountered",
                  "AN ILLEGAL MEMORY ACCESS WAS ENCOUNTERED", " ", "x", "79", ":", "(", ")", "Error", "error"]


@settings(max_examples=2000, deadline=None)
@given(st.lists(st.sampled_from(_ANCHOR_TOKENS), max_size=10).map("".join))
@pytest.mark.slow
def test_the_one_pass_anchor_search_equals_the_two_passes(text):
    # an ASCII body: one pass over its lowered text finds what the body and its lowered text do
    assert list(_SPOTTER._hits(text, one_pass=True)) == list(_SPOTTER._hits(text, one_pass=False))


def test_context_literals_name_real_contexts():
    assert set(CONTEXT_LITERALS) <= {name for name, *_ in NEGATIVE_CONTEXTS}
    assert not _may_match("ignored", "all good before ") and _may_match("ignored", "Skipped ")
    assert _may_match("ignored", "ſkipped ")  # not ASCII: the pattern decides
