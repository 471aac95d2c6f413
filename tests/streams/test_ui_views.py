"""The explorer's first-screen logic as pure functions (``streams.ui.views``,
``streams.ui.settings``): which action a person sees first, the link-out URLs and their
encoding, the fleet summary's counting rules, the list's folding, and UTC text for
nanosecond times left in stored reasons."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from schemas.records import Decision, RemediationAction, RemediationTarget
from streams.ui.settings import UISettings, check_link_template
from streams.ui.views import (
    ActionView,
    IncidentCost,
    executed_actions,
    fleet_summary,
    group_rows,
    link_outs,
    next_action,
    utc_text,
)

NS = 1_000_000_000
DAY = 86_400 * NS
NOW = 1796079600 * NS  # 2026-11-30T23:00:00Z
DAY0 = NOW - 23 * 3600 * NS


def action(aid: str, kind: str, state: str, *, host: str = "node-a02", cluster: str = "c1", severity: int = 30,
           incident: str | None = None, attribution: str = "att-1", expires_at: int | None = NOW + DAY,
           sequence: int = 1, updated_at: int = NOW - 3600 * NS) -> RemediationAction:
    return RemediationAction(action_id=aid, attribution_id=attribution, incident_id=incident, cluster=cluster,
                             target=RemediationTarget(host=host), action=kind, policy_id="p", severity=severity,
                             state=state, sequence=sequence, created_at=NOW - 7200 * NS, updated_at=updated_at,
                             expires_at=expires_at,
                             decision=Decision(by="bob", at=NOW - 3000 * NS, reason="ok") if state != "proposed" else None)


def view(a: RemediationAction) -> ActionView:
    return ActionView(a, [], a.target.host or "")


def test_next_action_is_the_proposal_waiting_for_a_person():
    done = view(action("act-done", "drain", "done", severity=30))
    reboot = view(action("act-reboot", "reboot", "proposed", severity=40, expires_at=NOW + 7200 * NS))
    notify = view(action("act-notify", "notify", "proposed", severity=10, expires_at=NOW + 60 * NS))
    expired = view(action("act-old", "rma", "proposed", severity=90, expires_at=NOW - NS))
    assert next_action([done, notify, reboot, expired], NOW) is reboot  # most severe waiting, not the expired one
    assert next_action([done, expired], NOW) is expired  # nothing waits: the latest
    running = view(action("act-run", "cordon", "executing", updated_at=NOW - 10 * NS))
    assert next_action([done, running, expired], NOW) is running
    assert next_action([], NOW) is None


def test_link_outs_percent_encode_every_value():
    templates = {"Grafana": "https://g.example/d/x?var-host={host}&var-cluster={cluster}&from={from_ms}&to={to_ms}",
                 "Loki": 'https://g.example/explore?q={{host="{host}"}}&from={from_iso}&to={to_s}'}
    start, end = 1796005263542000000, 1796005870000000000  # 02:21:03.542 .. 02:31:10 UTC
    links = link_outs(templates, ["node a&b/../x?#", "_scheduler", "node-a02"], "c 1", start, end)
    assert [(l.name, l.host) for l in links] == [("Grafana", "node a&b/../x?#"), ("Loki", "node a&b/../x?#"),
                                                 ("Grafana", "node-a02"), ("Loki", "node-a02")]
    assert links[0].url == ("https://g.example/d/x?var-host=node%20a%26b%2F..%2Fx%3F%23&var-cluster=c%201"
                            "&from=1796004963542&to=1796006170000")
    assert links[1].url == ('https://g.example/explore?q={host="node%20a%26b%2F..%2Fx%3F%23"}'
                            "&from=2026-11-30T02%3A16%3A03Z&to=1796006170")
    assert link_outs({}, ["node-a02"], "c1", start, end) == []
    assert len(link_outs(templates, [f"node-a{i:02d}" for i in range(9)], "c1", start, end)) == 8  # 4 hosts


@pytest.mark.parametrize("template, message", [
    ("ftp://g.example/{host}", "must start with http"),
    ("https://g.example/{hostname}", "unknown placeholder {hostname}"),
    ("https://g.example/{host!r}", "unknown placeholder"),
    ("https://g.example/{host:>10}", "unknown placeholder"),
    ("https://g.example/{host", "literal braces"),
])
def test_bad_link_templates_are_refused(template, message):
    with pytest.raises(ValueError, match=message):
        check_link_template(template)


def test_link_templates_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("FAULTSTREAM_UI_LOKI_URL", "https://l.example/?q={host}")
    monkeypatch.setenv("FAULTSTREAM_UI_GRAFANA_URL", "")
    assert UISettings().link_templates() == {"Loki": "https://l.example/?q={host}"}
    monkeypatch.setenv("FAULTSTREAM_UI_PROMETHEUS_URL", "https://p.example/?{instance}")
    with pytest.raises(ValueError, match="unknown placeholder {instance}"):
        UISettings()


def test_fleet_summary_counts_open_incidents_nodes_out_and_today_by_cluster():
    incidents = [
        IncidentCost("c1", "inc-a", DAY0 + 3600 * NS, DAY0 + 3700 * NS, 2.5),      # today, action proposed
        IncidentCost("c1", "att-b", DAY0 - 3600 * NS, DAY0 - 1800 * NS, 7.0),      # yesterday, no action, < 24 h
        IncidentCost("c1", "att-c", DAY0 + 7200 * NS, DAY0 + 7200 * NS, 1.25),     # today, all actions done
        IncidentCost("c2", "att-d", NOW - 2 * DAY, NOW - 2 * DAY + NS, 4.0),       # old, no action: not open
        IncidentCost("c2", "inc-e", DAY0 + 60 * NS, DAY0 + 60 * NS, 0.5),          # today, cordon awaiting cert
    ]
    actions = [
        action("act-1", "reboot", "proposed", incident="inc-a"),
        action("act-2", "drain", "executing", host="node-b07", cluster="c2", incident="inc-e", attribution="att-e"),
        action("act-3", "cordon", "executing", host="node-b09", cluster="c2", incident="inc-e", attribution="att-e"),
        action("act-4", "recertify", "executing", host="node-b11", cluster="c2", incident="inc-e", attribution="att-e"),
        action("act-5", "rma", "proposed", cluster="c3", attribution="att-f", expires_at=NOW - NS),  # expired
    ]
    transitions = {
        "act-2": [action("act-2", "drain", s, sequence=i) for i, s in enumerate(("proposed", "approved", "executing"), 1)],
        "act-3": [action("act-3", "cordon", s, sequence=i)
                  for i, s in enumerate(("proposed", "approved", "executing", "executing"), 1)],
    }
    executed = executed_actions(transitions)
    assert executed == {"act-3"}
    s = fleet_summary(incidents, actions, {"inc-a", "att-c", "inc-e"}, executed, NOW)
    by = {c.cluster: c for c in s.clusters}
    assert sorted(by) == ["c1", "c2"]  # c3's only proposal expired: nothing open there
    assert (by["c1"].open_incidents, by["c1"].incidents_today, by["c1"].gpu_hours_today) == (2, 2, 3.75)
    assert (by["c2"].open_incidents, by["c2"].incidents_today, by["c2"].gpu_hours_today) == (1, 1, 0.5)
    assert (by["c2"].cordoned, by["c2"].awaiting_certification, by["c2"].nodes_out) == (["node-b07"], ["node-b09"], 2)
    assert (s.total.open_incidents, s.total.incidents_today, s.total.gpu_hours_today) == (3, 3, 4.25)
    assert s.total.awaiting_certification == ["c2/node-b09"]
    assert s.day_start == DAY0


def test_the_verdicts_of_one_incident_fold_into_one_row():
    def row(aid, kind, at, inc=None):
        return SimpleNamespace(attribution_id=aid, incident_id=inc, scope_kind=kind, decided_at=at)

    rows = [row("att-w1", "workload", 10, "inc-1"), row("att-p", "fabric_port", 30, "inc-1"),
            row("att-i", "incident", 30, "inc-1"), row("att-w2", "workload", 20, "inc-1"),
            row("att-x", "workload", 25), row("att-y", "workload", 40)]
    groups = group_rows(rows)
    assert [(g.key, g.head.attribution_id, [m.attribution_id for m in g.members]) for g in groups] == [
        ("att-y", "att-y", []),
        ("inc-1", "att-i", ["att-w2", "att-w1", "att-p"]),
        ("att-x", "att-x", []),
    ]
    # without its incident verdict, the port verdict leads
    assert group_rows(rows[:2])[0].head.attribution_id == "att-p"


def test_nanosecond_times_in_stored_text_read_as_utc():
    assert utc_text("not approved by 1796005870000000000") == "not approved by 2026-11-30 02:31:10.000 UTC"
    assert utc_text("seq 17960058700000000001, 0.1796005870000000000, 179600587000000000") == (
        "seq 17960058700000000001, 0.1796005870000000000, 179600587000000000")  # not a 19-digit time
    assert utc_text(None) == ""
