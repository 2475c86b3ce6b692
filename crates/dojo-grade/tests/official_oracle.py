"""Differential oracle for dojo-grade: runs the official SWE-bench functions on the cases the
Rust test (tests/differential.rs) writes, and prints their results as JSON.

Two modes, because the two rule sets live in two releases of the same package:
  python official_oracle.py 5 CASES.json
      swebench==5.0.2 (installed in the tools venv): every parser on every log, and
      get_eval_report (5.x semantics: get_logs_eval + get_eval_tests_report) for cases with gold
      lists.
  PYTHONPATH=<swebench 4.1.0> python official_oracle.py 4 CASES.json PARSERS_5_0_2.py
      swebench==4.1.0's get_eval_report (classic semantics), with the 5.0.2 parser module loaded
      from its file so only the grading rules differ.

Logs are read by the official code itself (open(path)), so universal-newline handling is theirs.
"""

import importlib.util
import json
import sys
import types


def pairs(d):
    return [[k, v] for k, v in d.items()]


def run5(cases):
    import swebench
    from swebench.harness.log_parsers import PARSER_REGISTRY
    from swebench.harness import grading
    from swebench.types import TestSpec

    assert swebench.__version__ == "5.0.2", swebench.__version__
    out = {}
    for case in cases:
        res = {"parsed": {}}
        with open(case["path"], errors="replace") as f:
            text = f.read()
        for name in case["parsers"]:
            try:
                res["parsed"][name] = pairs(PARSER_REGISTRY["parse_log_" + name](text, None))
            except Exception as e:  # noqa: BLE001 - an upstream crash is a result to compare
                res["parsed"][name] = {"exception": type(e).__name__}
        gold = case.get("gold")
        if gold is not None:
            spec = TestSpec(
                instance_id=case["id"],
                image="",
                eval_script_list=[],
                repo="dojo/differential",
                version="0",
                FAIL_TO_PASS=gold["FAIL_TO_PASS"],
                PASS_TO_PASS=gold["PASS_TO_PASS"],
                log_parser="parse_log_" + case["parser"],
                eval_type=case.get("eval_type", "pass_and_fail"),
            )
            try:
                sm, found = grading.get_logs_eval(spec, case["path"])
                res["logs_eval"] = {"map": pairs(sm), "found": found}
                rep = grading.get_eval_report(
                    spec, {"instance_id": case["id"], "model_patch": "diff"}, case["path"], True
                )[case["id"]]
                if "tests_status" in rep:
                    rep["resolution_status"] = grading.get_resolution_status(rep["tests_status"])
                res["report"] = rep
            except Exception as e:  # noqa: BLE001
                res["report"] = {"exception": type(e).__name__ + ": " + str(e)}
        out[case["id"]] = res
    return out


def run4(cases, parsers_path):
    import swebench

    assert swebench.__version__ == "4.1.0", swebench.__version__
    if "swebench.types" not in sys.modules:
        sys.modules["swebench.types"] = types.SimpleNamespace(TestSpec=object)
    spec5 = importlib.util.spec_from_file_location("sb5_python_parsers", parsers_path)
    parsers5 = importlib.util.module_from_spec(spec5)
    spec5.loader.exec_module(parsers5)
    from swebench.harness import grading

    out = {}
    for case in cases:
        gold = case.get("gold")
        if gold is None:
            continue
        repo = "dojo/differential"
        grading.MAP_REPO_TO_PARSER = {repo: getattr(parsers5, "parse_log_" + case["parser"])}
        grading.MAP_REPO_VERSION_TO_SPECS = {repo: {"0": {"test_cmd": "pytest"}}}
        grading.FAIL_ONLY_REPOS = {repo} if case.get("eval_type") == "fail_only" else set()
        spec = types.SimpleNamespace(
            instance_id=case["id"],
            repo=repo,
            version="0",
            FAIL_TO_PASS=gold["FAIL_TO_PASS"],
            PASS_TO_PASS=gold["PASS_TO_PASS"],
        )
        try:
            rep = grading.get_eval_report(
                spec, {"instance_id": case["id"], "model_patch": "diff"}, case["path"], True
            )[case["id"]]
            if "tests_status" in rep:
                rep["resolution_status"] = grading.get_resolution_status(rep["tests_status"])
            out[case["id"]] = {"report": rep}
        except Exception as e:  # noqa: BLE001
            out[case["id"]] = {"report": {"exception": type(e).__name__ + ": " + str(e)}}
    return out


def main():
    mode, cases_path = sys.argv[1], sys.argv[2]
    with open(cases_path) as f:
        cases = json.load(f)
    if mode == "5":
        result = run5(cases)
    else:
        result = run4(cases, sys.argv[3])
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
