"""Every bundle's replay as JSON lines, to compare two revisions of the reader or the engine
byte for byte (a change that must not move a verdict: run it on both, then ``cmp``).

Per bundle (``workload.yaml`` below the given directories; default ``examples`` and the shared
fixtures ``../shared/fixtures/real/bundles`` when present), one line: its verdicts, events,
evidence observations (coverage records included) and lines read, as JSON with sorted keys; a
bundle that cannot be replayed gives its error instead.

    python3 bench/verdicts.py OUT.jsonl [DIR ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from connectors.bundle import BundleError  # noqa: E402 -- after the path set-up
from streams.replay import replay_bundle  # noqa: E402


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    roots = [Path(a) for a in sys.argv[2:]] or [p for p in (ROOT / "examples", ROOT.parent / "shared" / "fixtures"
                                                            / "real" / "bundles") if p.is_dir()]
    bundles = sorted({p.parent for r in roots for p in r.rglob("workload.yaml") if p.parent.parent.name != "workloads"})
    with open(sys.argv[1], "w", encoding="utf-8") as out:
        for b in bundles:
            try:
                r = replay_bundle(b)
                rec = {"bundle": b.name, "verdicts": [a.model_dump(mode="json") for a in r.attributions],
                       "events": [e.model_dump(mode="json") for e in r.events],
                       "evidence": [o.model_dump(mode="json") for o in r.observations], "lines": r.lines_read}
            except BundleError as exc:
                rec = {"bundle": b.name, "error": str(exc)}
            out.write(json.dumps(rec, sort_keys=True) + "\n")
    print(f"{len(bundles)} bundles -> {sys.argv[1]}")


if __name__ == "__main__":
    main()
