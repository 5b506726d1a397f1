"""Dev helper: print each case's actual verdict (to review by eye); --write fills `reason: TODO`."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import test_cases as T

from engine.evaluators import evaluate

for path in sorted(T.CASES_DIR.glob(sys.argv[1] if len(sys.argv) > 1 else "*.yaml")):
    text = path.read_text()
    from ruamel.yaml import YAML
    for case in YAML(typ="safe", pure=True).load(text):
        v = evaluate(case["eval"], T.make_answer(case["answer"]), T.make_test(case))
        flag = "" if (round(v.score, 4) == round(float(case["score"]), 4) and v.passed == case.get("passed", case["score"] >= 1) and v.error == case.get("error", False)) else "  <<<<<< MISMATCH"
        print(f"{case['name']}: score={v.score:.4f} passed={v.passed} error={v.error}{flag}\n    {v.reason}")
        if "--write" in sys.argv and case["reason"] == "TODO":
            import json
            text = text.replace("reason: TODO", "reason: " + json.dumps(v.reason, ensure_ascii=False), 1)
    if "--write" in sys.argv:
        path.write_text(text)
