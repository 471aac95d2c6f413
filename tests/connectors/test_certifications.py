"""Certification inputs (``connectors/certifications.py``): the real ``dcgmi diag`` table of the
``rc-37`` fixture (DCGM 4.2.3), samples written from the documented formats
(``tests/data/certifications``: DCGM 4.x and 3.x tables and JSON, nccl-tests ``all_reduce_perf``
output, NVCRE reports), malformed input, and ``faultstream connect certifications`` end to end
on a real Kafka broker (publish, consume back, records equal)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from connectors.certifications import (
    CertificationError,
    detect_format,
    document_time,
    iso_to_ns,
    parse_certification,
    parse_dcgm_diag_json,
    parse_dcgm_diag_text,
    parse_nccl_tests,
    parse_nvcre_json,
)
from connectors.registry import connectors
from schemas.records import Certification
from streams.cli import app
from tests.kafka_fixtures import kafka_bootstrap, kafka_config, kafka_topic_factory  # noqa: F401
from tests.connectors.test_files_connector import consume, values

DATA = Path(__file__).resolve().parents[1] / "data" / "certifications"
T0 = iso_to_ns("2026-11-30T03:10:00Z")


def read(name: str) -> str:
    return (DATA / name).read_text()


def by_name(cert: Certification) -> dict[str, tuple[str, str]]:
    return {t.name: (t.result, t.detail) for t in cert.tests}


# -- dcgmi diag, text ---------------------------------------------------------------------------


def test_dcgm_text_real_rc37_table(real_fixtures: Path):
    """The table from DCGM issue 253 (DCGM 4.2.3, 4 GPUs, cut after the memory row)."""
    text = (real_fixtures / "public" / "rc-37" / "lines.log").read_text()
    assert detect_format(text) == "dcgm-text"
    cert = parse_dcgm_diag_text(text, "node-a01", T0, cluster="c1")
    assert by_name(cert) == {"software": ("pass", ""), "memory": ("pass", "")}
    assert cert.passed is True
    assert (cert.host, cert.cluster, cert.suite, cert.finished_at) == ("node-a01", "c1", "dcgm-diag", T0)
    assert cert.source == "dcgmi diag (DCGM 4.2.3)"
    # deterministic id: the same input gives the same record
    again = parse_dcgm_diag_text(text, "node-a01", T0, cluster="c1")
    assert again.certification_id == cert.certification_id and cert.certification_id.startswith("cert-")
    assert parse_dcgm_diag_text(text, "node-a02", T0).certification_id != cert.certification_id


def test_dcgm_text_4x_failure_with_wrapped_warnings():
    cert = parse_dcgm_diag_text(read("dcgm-diag-r3-4x-fail.txt"), "node-a01", T0)
    assert [t.name for t in cert.tests] == ["software", "pcie", "memory", "diagnostic", "targeted_power"]
    tests = by_name(cert)
    assert tests["software"] == ("pass", "") and tests["pcie"] == ("pass", "")
    # the 45-character chunks are joined back exactly ("row  remapping" split mid-phrase)
    assert tests["memory"] == ("fail", "GPU2: Fail: GPU 2 had uncorrectable memory errors and row "
                                       "remapping failed. Drain the GPU and reset it or reboot the node.")
    # the test row says Warn; DCGM 4.x prints the entity row of a warning as "Fail"
    assert tests["diagnostic"] == ("warn", "GPU1: Warn: Detected clocks event due to thermal violation in GPU 1.")
    assert tests["targeted_power"] == ("skip", "")
    assert cert.passed is False


def test_dcgm_text_3x_summary_rows():
    cert = parse_dcgm_diag_text(read("dcgm-diag-r3-3x-fail.txt"), "node-a01", T0)
    tests = by_name(cert)
    assert len(tests) == 13
    assert tests["PCIe"] == ("pass", "")
    assert tests["GPU Memory"] == ("fail", "GPU2: Fail; GPU 2 had uncorrectable memory errors and 3 rows were remapped")
    assert tests["Targeted Power"] == ("skip", "")
    assert cert.passed is False and cert.source == "dcgmi diag"


def test_dcgm_text_warn_and_skip_do_not_fail():
    text = "\n".join([
        "| Diagnostic                | Result                                         |",
        "| memory                    | Warn                                           |",
        "|                           | GPU0: Fail                                     |",
        # the first chunk ends with a space (45 characters): kept when the chunks are joined
        "| Warning: GPU0             | Detected clocks event due to power violation   |",
        "|                           | in GPU 0.                                      |",
        "| targeted_power            | Skip                                           |",
    ])
    cert = parse_dcgm_diag_text(text, "node-a01", T0)
    assert by_name(cert)["memory"] == ("warn", "GPU0: Warn: Detected clocks event due to power violation in GPU 0.")
    assert cert.passed is True


def test_dcgm_text_cut_after_the_deployment_checks_does_not_certify(real_fixtures: Path):
    """A table cut short after its Deployment section (or a -r 1 run) passes every test it has,
    but says nothing of the GPU: it must not return a drained node to service."""
    lines = (real_fixtures / "public" / "rc-37" / "lines.log").read_text().splitlines()
    cut = lines[: next(i for i, line in enumerate(lines) if "Hardware" in line)]
    cert = parse_dcgm_diag_text("\n".join(cut), "node-a01", T0)
    assert [t.result for t in cert.tests if t.name != "hardware tests"] and all(
        t.result == "pass" for t in cert.tests if t.name != "hardware tests")
    assert cert.passed is False
    assert by_name(cert)["hardware tests"][0] == "fail"
    # the whole table certifies
    assert parse_dcgm_diag_text("\n".join(lines), "node-a01", T0).passed is True


@pytest.mark.parametrize("text, message", [
    ("", "no 'dcgmi diag' table"),
    ("hello world\nnothing here\n", "no 'dcgmi diag' table"),
    ("+---+\n| Diagnostic                | Result                                         |\n+===+\n",
     "a table without test rows"),
    ("| memory                    | Passed with flying colours                     |", "test 'memory' has no result"),
    ("| Warning: GPU0             | orphan warning                                 |", "Warning row before any test row"),
    ("Error: Unable to complete diagnostic for group 2147483647. Return: (-30) The GPU Diagnostic returned an error.",
     "dcgmi diag reported an error (line 1): Unable to complete diagnostic"),
    ("| memory                    | Pass                                           |\n|   | GPU0: Maybe |", None),
])
def test_dcgm_text_malformed(text, message):
    if message is None:  # an unrecognised continuation row is ignored, the rest is read
        assert by_name(parse_dcgm_diag_text(text, "node-a01", T0)) == {"memory": ("pass", "")}
        return
    with pytest.raises(CertificationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_dcgm_diag_text(text, "node-a01", T0)


# -- dcgmi diag, JSON ---------------------------------------------------------------------------


def test_dcgm_json_4x():
    text = read("dcgm-diag-r3-4x-fail.json")
    assert detect_format(text) == "dcgm-json"
    cert = parse_dcgm_diag_json(text, "node-a01", T0)
    assert by_name(cert) == {
        "software": ("pass", ""),
        "memory": ("fail", "GPU2: Fail: GPU 2 had uncorrectable memory errors and row remapping failed."),
        "diagnostic": ("warn", "GPU1: Warn: Detected clocks event due to thermal violation in GPU 1."),
        "targeted_power": ("skip", ""),
    }
    assert cert.passed is False and cert.source == "dcgmi diag -j (DCGM 4.2.3)"


def test_dcgm_json_3x_gpu_id_and_uppercase_status():
    cert = parse_dcgm_diag_json(read("dcgm-diag-r2-3x-pass.json"), "node-a01", T0)
    assert by_name(cert) == {
        "Denylist": ("pass", ""),
        "NVML Library": ("pass", ""),
        "GPU Memory": ("pass", ""),
        # no test_summary in 3.x: the worst result (pass beats skip), warnings kept
        "Targeted Power": ("pass", "GPU0: Skip: Skipping test Targeted Power because ECC is not enabled on GPU 0"),
    }
    assert cert.passed is True and cert.source == "dcgmi diag -j"


def test_dcgm_json_2x_string_warnings_and_gpu_ids():
    doc = {"DCGM GPU Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [
        {"name": "GPU Memory", "results": [{"gpu_ids": "0", "status": "Fail", "warnings": "GPU 0 DBE"},
                                           {"gpu_ids": "1", "status": "Pass"}]}]}]}}
    cert = parse_dcgm_diag_json("Successfully ran diagnostic\n" + json.dumps(doc), "node-a01", T0)
    assert by_name(cert) == {"GPU Memory": ("fail", "GPU0: Fail: GPU 0 DBE")}


@pytest.mark.parametrize("text, message", [
    ('{"DCGM Diagnostic": {"runtime_error": "Couldn\'t find the specified GPUs"}}',
     "dcgmi diag did not run: Couldn't find the specified GPUs"),
    ('{"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [{"name": "mem', "not valid JSON"),
    ('{"something": 1}', "no 'DCGM Diagnostic'"),
    ('{"DCGM Diagnostic": {"test_categories": []}}', "has no test_categories"),
    ('{"DCGM Diagnostic": {"test_categories": [{"tests": [{"name": "memory", "results": [{"gpu_id": "0"}]}]}]}}',
     r"results\[0\] has no status"),
    ('{"DCGM Diagnostic": {"test_categories": [{"tests": [{"name": "memory", "results": [{"status": "Green"}]}]}]}}',
     "unknown status 'Green'"),
    ('[1, 2]', "expected an object"),
])
def test_dcgm_json_malformed(text, message):
    with pytest.raises(CertificationError, match=message):
        parse_dcgm_diag_json(text, "node-a01", T0)


# -- nccl-tests ---------------------------------------------------------------------------------


def test_nccl_all_reduce_pass():
    text = read("nccl-all-reduce-pass.log")
    assert detect_format(text) == "nccl-tests"
    cert = parse_nccl_tests(text, "node-a01", T0, min_busbw_gbps=350)
    assert by_name(cert) == {
        "all_reduce_busbw": ("pass", "avg bus bandwidth 382.21 GB/s >= threshold 350 GB/s; "
                                     "peak 387.02 GB/s at 8589934592 B"),
        "all_reduce_data_check": ("pass", "out of bounds values: 0"),
    }
    assert cert.passed is True and cert.suite == "nccl-tests" and cert.source == "nccl-tests all_reduce_perf"


def test_nccl_threshold_is_inclusive_and_strict():
    text = read("nccl-all-reduce-pass.log")
    assert parse_nccl_tests(text, "node-a01", T0, 382.21).passed is True
    low = parse_nccl_tests(text, "node-a01", T0, 382.22)
    assert low.passed is False
    assert by_name(low)["all_reduce_busbw"][0] == "fail"


def test_nccl_all_reduce_fail_with_mpi_prefix():
    cert = parse_nccl_tests(read("nccl-all-reduce-fail.log"), "node-a03", T0, 350)
    assert by_name(cert) == {
        "all_reduce_busbw": ("fail", "avg bus bandwidth 121.555 GB/s < threshold 350 GB/s; "
                                     "peak 121.81 GB/s at 8589934592 B"),
        "all_reduce_data_check": ("fail", "out of bounds values: 2"),
    }
    assert cert.passed is False


def test_nccl_crashed_run_is_a_failed_certification():
    cert = parse_nccl_tests(read("nccl-all-reduce-crash.log"), "node-a01", T0, 350)
    assert by_name(cert) == {"all_reduce_run": (
        "fail", "node-a01: Test NCCL failure common.cu:1005 'unhandled system error "
                "(run with NCCL_DEBUG=INFO for details) / '")}
    assert cert.passed is False


@pytest.mark.parametrize("text", [
    "",
    "# Collective test starting: all_reduce_perf\n# nThread 1 nGpus 8\n  1024  256  float  sum  -1  9.1  0.11  0.20  0\n",
])
def test_nccl_incomplete_output_is_an_error(text):
    with pytest.raises(CertificationError, match="no '# Avg bus bandwidth' line"):
        parse_nccl_tests(text, "node-a01", T0, 350)


# -- NVCRE --------------------------------------------------------------------------------------


def test_nvcre_failed_report_one_certification_per_node():
    text = read("nvcre-report-failed.json")
    assert detect_format(text) == "nvcre"
    certs = parse_nvcre_json(text, T0, cluster="c1")
    assert [c.host for c in certs] == ["node-a01", "node-a02", "node-a03", "node-a04"]
    assert [c.passed for c in certs] == [True, True, False, False]
    assert all(c.suite == "nvcre" and c.cluster == "c1" and c.finished_at == T0 for c in certs)
    assert certs[0].source == "nvcre burn-in-2026-11-30"
    assert by_name(certs[0]) == {
        "communication/nccl-all-reduce": ("pass", "group group-0: busBW 386.90 GB/s"),
        "training/nemotron5-8b": ("warn", "BackoffLimitExceeded (8 pods failed) (not on this node)"),
    }
    assert by_name(certs[3]) == {
        "communication/nccl-all-reduce": ("fail", "group group-1: bus bandwidth below minimum (busBW 121.80 GB/s)"),
        "training/nemotron5-8b": ("fail", "failed group group-1: BackoffLimitExceeded (8 pods failed)"),
    }


def test_nvcre_export_envelope_time_cluster_and_host_selection():
    text = read("nvcre-export-passed.json")
    at = document_time(text, "nvcre")
    assert at == iso_to_ns("2026-12-01T06:12:30Z")
    (cert,) = parse_nvcre_json(text, at, host="node-a04")
    assert (cert.host, cert.cluster, cert.passed, cert.finished_at) == ("node-a04", "c1", True, at)
    assert by_name(cert) == {"communication/nccl-all-reduce": ("pass", "busBW 387.80 GB/s at 16 GB")}
    with pytest.raises(CertificationError, match="does not name node-a01"):
        parse_nvcre_json(text, at, host="node-a01")


def _report(**changes) -> str:
    rep = json.loads(read("nvcre-report-failed.json"))
    rep.update(changes)
    return json.dumps(rep)


def test_nvcre_incomplete_report_does_not_return_nodes():
    text = _report(result="INCOMPLETE", excludedNodes=["node-a02"], exclusionReason="node cordoned")
    certs = parse_nvcre_json(text, T0)
    assert [c.host for c in certs] == ["node-a01", "node-a03", "node-a04"]
    assert by_name(certs[0])["nvcre/result"] == ("fail", "certification INCOMPLETE: node cordoned")
    assert not any(c.passed for c in certs)
    with pytest.raises(CertificationError, match="excluded node-a02 from testing: node cordoned"):
        parse_nvcre_json(text, T0, host="node-a02")


def test_nvcre_failed_node_without_category_evidence_fails():
    rep = json.loads(read("nvcre-export-passed.json"))["report"]
    rep["nodeResults"][0]["status"] = "Failed"
    (cert,) = parse_nvcre_json(json.dumps(rep), T0, host="node-a03")
    assert cert.passed is False
    assert by_name(cert)["nvcre/node"] == ("fail", "NVCRE reports this node failed")


@pytest.mark.parametrize("text, message", [
    (_report(result="RUNNING"), "still RUNNING"),
    ('{"name": "x"}', "expected an object with 'result' and 'categories'"),
    ('{"name": "x", "result": "PASSED", "categories": [], "failedNodes": null}', "names no nodes"),
    ('{"name": "x", "result": "PASSED", "categories": {"a": 1}}', "'categories' is not a list"),
    ('{"name": "x", "result": "PASS', "not valid JSON"),
])
def test_nvcre_malformed(text, message):
    with pytest.raises(CertificationError, match=message):
        parse_nvcre_json(text, T0)


# -- dispatch -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name, fmt", [
    ("dcgm-diag-r3-4x-fail.txt", "dcgm-text"), ("dcgm-diag-r3-3x-fail.txt", "dcgm-text"),
    ("dcgm-diag-r3-4x-fail.json", "dcgm-json"), ("dcgm-diag-r2-3x-pass.json", "dcgm-json"),
    ("nccl-all-reduce-pass.log", "nccl-tests"), ("nccl-all-reduce-fail.log", "nccl-tests"),
    ("nccl-all-reduce-crash.log", "nccl-tests"), ("nvcre-report-failed.json", "nvcre"),
    ("nvcre-export-passed.json", "nvcre"),
])
def test_detect_format(name, fmt):
    assert detect_format(read(name)) == fmt


@pytest.mark.parametrize("text", ["just some words\n", '{"kind": "something else"}'])
def test_detect_format_unknown(text):
    with pytest.raises(CertificationError):
        detect_format(text)


def test_parse_certification_needs_host_and_threshold():
    with pytest.raises(CertificationError, match="--host is required for dcgm-text"):
        parse_certification(read("dcgm-diag-r3-4x-fail.txt"), "auto", host=None, finished_at_ns=T0)
    with pytest.raises(CertificationError, match="needs --min-busbw"):
        parse_certification(read("nccl-all-reduce-pass.log"), "auto", host="node-a01", finished_at_ns=T0)
    with pytest.raises(CertificationError, match="unknown format 'xml'"):
        parse_certification("x", "xml", host="node-a01", finished_at_ns=T0)


def test_iso_to_ns():
    assert iso_to_ns("2026-11-30T01:20:00Z") == 1_796_001_600 * 10**9
    assert iso_to_ns("2026-11-30T02:20:00.5+01:00") == 1_796_001_600 * 10**9 + 500_000_000
    assert iso_to_ns("2026-11-30T01:20:00") == 1_796_001_600 * 10**9  # no offset: UTC
    with pytest.raises(CertificationError, match="not an ISO 8601 time"):
        iso_to_ns("yesterday")


# -- the connector end to end on a real broker --------------------------------------------------


def test_connector_is_registered():
    assert "certifications" in connectors()


def test_connect_certifications_publishes_and_consumes_back(tmp_path, kafka_bootstrap, kafka_config,  # noqa: F811
                                                            kafka_topic_factory):  # noqa: F811
    topic = kafka_topic_factory("certs", partitions=3)
    files = [DATA / "dcgm-diag-r3-4x-fail.txt", DATA / "nccl-all-reduce-pass.log"]
    result = CliRunner().invoke(app, [
        "connect", "certifications", *map(str, files), "--host", "node-a01", "--cluster", "c1",
        "--finished-at", "2026-11-30T03:10:00Z", "--min-busbw", "350",
        "--bootstrap", kafka_bootstrap, "--topic", topic])
    assert result.exit_code == 0, result.output
    assert "published 2 certifications (1 passed, 1 failed) of 2 files" in result.output
    expected = [
        parse_dcgm_diag_text(read(files[0].name), "node-a01", T0, cluster="c1"),
        parse_nccl_tests(read(files[1].name), "node-a01", T0, 350, cluster="c1"),
    ]
    msgs = consume(kafka_config, topic, 2)
    assert [m.key().decode() for m in msgs] == ["node-a01", "node-a01"]
    got = [Certification.model_validate(v) for v in values(msgs)]
    # one key -> one partition -> publishing order
    assert got == expected
    assert msgs[0].headers() and dict(msgs[0].headers())["schema"] == b"Certification"


def test_connect_certifications_nvcre_keys_by_node_and_mtime_default(tmp_path, kafka_bootstrap,  # noqa: F811
                                                                     kafka_config, kafka_topic_factory):  # noqa: F811
    topic = kafka_topic_factory("certs", partitions=3)
    path = tmp_path / "report.json"
    path.write_text(read("nvcre-report-failed.json"))
    mtime_ns = iso_to_ns("2026-11-30T05:00:00Z")
    os.utime(path, ns=(mtime_ns, mtime_ns))
    result = CliRunner().invoke(app, ["connect", "certifications", str(path), "--cluster", "c1",
                                      "--bootstrap", kafka_bootstrap, "--topic", topic])
    assert result.exit_code == 0, result.output
    assert "published 4 certifications (2 passed, 2 failed)" in result.output
    got = {m.key().decode(): Certification.model_validate_json(m.value()) for m in consume(kafka_config, topic, 4)}
    assert got == {c.host: c for c in parse_nvcre_json(read("nvcre-report-failed.json"), mtime_ns, cluster="c1")}
    assert {c.finished_at for c in got.values()} == {mtime_ns}


def test_connect_certifications_malformed_file_publishes_nothing(tmp_path, kafka_bootstrap, kafka_config,  # noqa: F811
                                                                 kafka_topic_factory):  # noqa: F811
    topic = kafka_topic_factory("certs")
    bad = tmp_path / "diag.json"
    bad.write_text('{"DCGM Diagnostic": {"test_categories": [')
    result = CliRunner().invoke(app, ["connect", "certifications", "--cluster", "c1", str(DATA / "nccl-all-reduce-pass.log"),
                                      str(bad), "--host", "node-a01", "--min-busbw", "350",
                                      "--bootstrap", kafka_bootstrap, "--topic", topic])
    assert result.exit_code == 2
    assert result.output.strip().startswith(f"error: {bad}: dcgmi diag JSON: not valid JSON")
    assert "Traceback" not in result.output
    assert consume(kafka_config, topic, 1, timeout_s=3) == []


@pytest.mark.parametrize("args, message", [
    (["--host", "node-a01", "--format", "xml"], "--format must be auto, dcgm-text"),
    (["--host", "node-a01", "--finished-at", "soon"], "--finished-at: not an ISO 8601 time: 'soon'"),
    ([], "--host is required for nccl-tests input"),
    (["--host", "node-a01"], "nccl-tests input needs --min-busbw"),
])
def test_connect_certifications_usage_errors(args, message):
    result = CliRunner().invoke(app, ["connect", "certifications", "--cluster", "c1", str(DATA / "nccl-all-reduce-pass.log"),
                                      *args, "--bootstrap", "127.0.0.1:1"])
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_connect_certifications_missing_file():
    result = CliRunner().invoke(app, ["connect", "certifications", "--cluster", "c1", "/nonexistent/diag.txt", "--host", "node-a01"])
    assert result.exit_code == 2
    assert "error: /nonexistent/diag.txt: No such file or directory" in result.output
