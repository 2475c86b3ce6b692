//! From a status map and the task's test lists to FAIL_TO_PASS / PASS_TO_PASS success and
//! failure and a resolution status, under one of two documented rule sets.
//!
//! **Classic** (default; swebench 2.x–4.x, what SWE-Gym and SWE-Master score with; the oracle
//! in the differential test is `swebench==4.1.0`'s `grading.py`):
//! passed = `PASSED` or `XFAIL`; failed = absent, `FAILED` or `ERROR`; anything else
//! (notably `SKIPPED`) counts as neither, for FAIL_TO_PASS and PASS_TO_PASS alike. Ids match
//! exactly, except ids the datasets cut at a space inside a parametrization (`test_x[sin(`),
//! which match the logged names cut at that space, as 2.x–4.x's parser cut them (dojo reads
//! logs with 5.x's parsers, which keep whole names). The log is read between the start/end markers (the whole log when that region
//! yields no result), with no further validity checks.
//!
//! **Swebench5** (`swebench==5.0.2`): a `SKIPPED` FAIL_TO_PASS test is a failure, a `SKIPPED`
//! PASS_TO_PASS test is maintained; ids truncated inside a parametrization (more `[` than `]`)
//! are prefix-matched when all candidates agree on pass/fail; a run with no results and no sign a suite ran, or a non-zero
//! test exit code with no failure in the map, is "no valid test output".
//!
//! Both: FAIL_ONLY evaluation (`eval_type = fail_only`) counts a test as failed only when its
//! status is exactly `FAILED`; rates are success/(success+failure), 1 when both are empty;
//! FULL iff both rates are 1, PARTIAL iff 0 < F2P < 1 and P2P = 1, else NO.

use std::sync::LazyLock;

use regex::Regex;

use crate::parsers::{ERROR, FAILED, PASSED, Parser, SKIPPED, StatusMap, XFAIL};

/// Harness log markers (`swebench.harness.constants`).
pub const APPLY_PATCH_FAIL: &str = ">>>>> Patch Apply Failed";
pub const APPLY_PATCH_PASS: &str = ">>>>> Applied Patch";
pub const RESET_FAILED: &str = ">>>>> Reset Failed";
pub const TESTS_ERROR: &str = ">>>>> Tests Errored";
pub const TESTS_TIMEOUT: &str = ">>>>> Tests Timed Out";
pub const START_TEST_OUTPUT: &str = ">>>>> Start Test Output";
pub const END_TEST_OUTPUT: &str = ">>>>> End Test Output";
pub const TEST_EXIT_CODE: &str = ">>>>> Test Exit Code";

/// Which grading rules apply (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Semantics {
    #[default]
    Classic,
    Swebench5,
}

/// A `--semantics` name that is neither `classic` nor `swebench5`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--semantics {0:?}: expected classic or swebench5")]
pub struct UnknownSemantics(pub String);

impl std::str::FromStr for Semantics {
    type Err = UnknownSemantics;

    /// [`Semantics::by_name`], or an error naming the flag and the choices.
    fn from_str(s: &str) -> Result<Semantics, UnknownSemantics> {
        Semantics::by_name(s).ok_or_else(|| UnknownSemantics(s.to_string()))
    }
}

impl Semantics {
    pub fn by_name(s: &str) -> Option<Semantics> {
        match s {
            "classic" => Some(Semantics::Classic),
            "swebench5" | "5.x" | "swebench-5" => Some(Semantics::Swebench5),
            _ => None,
        }
    }
}

/// How FAIL_TO_PASS / PASS_TO_PASS are judged; typed where tasks are loaded.
pub use dojo_task::EvalType;

/// `{"success": [...], "failure": [...]}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SuccessFailure {
    pub success: Vec<String>,
    pub failure: Vec<String>,
}

impl SuccessFailure {
    fn rate_is_one(&self) -> bool {
        self.failure.is_empty()
    }
}

/// The official `tests_status` object.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TestsStatus {
    #[serde(rename = "FAIL_TO_PASS")]
    pub fail_to_pass: SuccessFailure,
    #[serde(rename = "PASS_TO_PASS")]
    pub pass_to_pass: SuccessFailure,
    #[serde(rename = "FAIL_TO_FAIL")]
    pub fail_to_fail: SuccessFailure,
    #[serde(rename = "PASS_TO_FAIL")]
    pub pass_to_fail: SuccessFailure,
}

/// `ResolvedStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ResolvedStatus {
    #[serde(rename = "RESOLVED_FULL")]
    Full,
    #[serde(rename = "RESOLVED_PARTIAL")]
    Partial,
    #[serde(rename = "RESOLVED_NO")]
    No,
}

impl ResolvedStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ResolvedStatus::Full => "RESOLVED_FULL",
            ResolvedStatus::Partial => "RESOLVED_PARTIAL",
            ResolvedStatus::No => "RESOLVED_NO",
        }
    }
}

/// The expected lists of one instance.
#[derive(Debug, Clone, Copy, Default)]
pub struct GoldLists<'a> {
    pub fail_to_pass: &'a [String],
    pub pass_to_pass: &'a [String],
    pub fail_to_fail: &'a [String],
    pub pass_to_fail: &'a [String],
}

fn is_passing(status: &str) -> bool {
    status == PASSED || status == XFAIL
}

/// 5.x `_resolve_case`: exact key, else the first prefix match of a truncated parametrized id
/// when all matches agree on pass-vs-fail.
fn resolve_case<'m>(case: &'m str, sm: &'m StatusMap) -> Option<&'m str> {
    if sm.contains(case) {
        return Some(case);
    }
    if case.matches('[').count() > case.matches(']').count() {
        let matches: Vec<(&str, &str)> = sm.iter().filter(|(k, _)| k.starts_with(case)).collect();
        if let Some(first) = matches.first() {
            let p = is_passing(first.1);
            if matches.iter().all(|(_, s)| is_passing(s) == p) {
                return Some(first.0);
            }
        }
    }
    None
}

fn lookup<'m>(case: &'m str, sm: &'m StatusMap, sem: Semantics) -> Option<&'m str> {
    matched_key(case, sm, sem).and_then(|k| sm.get(k))
}

/// The key of the status map that the id `case` matches under `sem`, if any.
pub(crate) fn matched_key<'m>(case: &'m str, sm: &'m StatusMap, sem: Semantics) -> Option<&'m str> {
    match sem {
        Semantics::Classic => resolve_cut_at_space(case, sm),
        Semantics::Swebench5 => resolve_case(case, sm),
    }
}

/// Classic's match: the exact key, else, for an id the dataset cut inside a parametrization at
/// a space (`test_x[sin(` for `test_x[sin( x)]`), the logged names that 2.x–4.x's parser cut
/// at that same space (it kept a line's second word), when they agree on pass vs fail. dojo
/// reads logs with 5.x's parsers, which keep whole names, so this gives 2.x–4.x's answer.
fn resolve_cut_at_space<'m>(case: &'m str, sm: &'m StatusMap) -> Option<&'m str> {
    if sm.contains(case) {
        return Some(case);
    }
    if case.matches('[').count() <= case.matches(']').count() || case.ends_with(char::is_whitespace)
    {
        return None;
    }
    let matches: Vec<(&str, &str)> = sm
        .iter()
        .filter(|(k, _)| {
            k.strip_prefix(case)
                .is_some_and(|rest| rest.starts_with(char::is_whitespace))
        })
        .collect();
    let first = matches.first()?;
    let p = is_passing(first.1);
    matches
        .iter()
        .all(|(_, s)| is_passing(s) == p)
        .then_some(first.0)
}

fn test_passed(case: &str, sm: &StatusMap, sem: Semantics) -> bool {
    lookup(case, sm, sem).is_some_and(is_passing)
}

fn test_failed(case: &str, sm: &StatusMap, sem: Semantics) -> bool {
    match lookup(case, sm, sem) {
        None => true,
        Some(s) => s == FAILED || s == ERROR || (sem == Semantics::Swebench5 && s == SKIPPED),
    }
}

fn test_maintained(case: &str, sm: &StatusMap, sem: Semantics) -> bool {
    match sem {
        Semantics::Classic => test_passed(case, sm, sem),
        Semantics::Swebench5 => {
            test_passed(case, sm, sem) || lookup(case, sm, sem) == Some(SKIPPED)
        }
    }
}

/// `get_eval_tests_report`.
pub fn eval_tests_report(
    sm: &StatusMap,
    gold: &GoldLists,
    calculate_to_fail: bool,
    eval_type: EvalType,
    sem: Semantics,
) -> TestsStatus {
    let check = |cases: &[String], p2p: bool| -> SuccessFailure {
        let mut out = SuccessFailure::default();
        for case in cases {
            match eval_type {
                EvalType::FailOnly => {
                    if sm.get(case) == Some(FAILED) {
                        out.failure.push(case.clone());
                    } else {
                        out.success.push(case.clone());
                    }
                }
                EvalType::PassAndFail => {
                    let ok = if p2p {
                        test_maintained(case, sm, sem)
                    } else {
                        test_passed(case, sm, sem)
                    };
                    if ok {
                        out.success.push(case.clone());
                    } else if test_failed(case, sm, sem) {
                        out.failure.push(case.clone());
                    }
                }
            }
        }
        out
    };
    let mut ts = TestsStatus {
        fail_to_pass: check(gold.fail_to_pass, false),
        pass_to_pass: check(gold.pass_to_pass, true),
        ..Default::default()
    };
    if calculate_to_fail {
        ts.fail_to_fail = check(gold.fail_to_fail, false);
        ts.pass_to_fail = check(gold.pass_to_fail, false);
    }
    ts
}

/// `get_resolution_status`.
pub fn resolution_status(ts: &TestsStatus) -> ResolvedStatus {
    let f2p_full = ts.fail_to_pass.rate_is_one();
    let p2p_full = ts.pass_to_pass.rate_is_one();
    if f2p_full && p2p_full {
        ResolvedStatus::Full
    } else if !ts.fail_to_pass.success.is_empty() && !f2p_full && p2p_full {
        ResolvedStatus::Partial
    } else {
        ResolvedStatus::No
    }
}

static SUITE_RAN: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(concat!(
        r"(?m)Executed [1-9]\d* of \d+",
        r"|TOTAL: [1-9]\d* (?:SUCCESS|FAILED)",
        r"|[1-9]\d* passing",
        r"|Tests:[\s\x1c-\x1f]+[1-9]\d*",
        r"|Test Suites:[\s\x1c-\x1f]+(?:\d+ \w+, )*[1-9]\d* total",
        r"|^# tests [1-9]\d*",
        r"|[1-9]\d* specs?, \d+ failures?",
        r"|': ok$",
    ))
    .unwrap_or_else(|e| panic!("SUITE_RAN: {e}"))
});

static EXIT_CODE_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r">>>>> Test Exit Code:[\s\x1c-\x1f]*(-?\d+)")
        .unwrap_or_else(|e| panic!("EXIT_CODE_RE: {e}"))
});

/// `parse_test_exit_code`: the exit status the eval script recorded, if any.
pub fn parse_test_exit_code(content: &str) -> Option<i64> {
    let m = EXIT_CODE_RE.captures(content)?.get(1)?.as_str();
    // Python's int() takes any Unicode digits and any size; only zero-vs-non-zero matters.
    let digits: String = m
        .chars()
        .filter_map(|c| c.to_digit(10).map(|d| char::from(b'0' + d as u8)))
        .collect();
    Some(digits.parse::<i64>().unwrap_or(i64::MAX) * if m.starts_with('-') { -1 } else { 1 })
}

/// Read a harness log as the harness does (`open(path).read()`): UTF-8 (invalid bytes become
/// U+FFFD instead of raising) with universal newlines (`\r\n` and `\r` become `\n`).
pub fn read_log_text(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(bytes);
    if !s.contains('\r') {
        return s.into_owned();
    }
    s.replace("\r\n", "\n").replace('\r', "\n")
}

/// The part of a log between the first start marker and the first end marker after it
/// (`content.split(START)[1].split(END)[0]`).
fn sliced(content: &str) -> &str {
    let after = content.split(START_TEST_OUTPUT).nth(1).unwrap_or("");
    after.split(END_TEST_OUTPUT).next().unwrap_or("")
}

/// `get_logs_eval` on a log's text: the status map, and whether the log holds valid test output.
pub fn logs_eval(content: &str, parser: Parser, sem: Semantics) -> (StatusMap, bool) {
    let bad = [APPLY_PATCH_FAIL, RESET_FAILED, TESTS_ERROR, TESTS_TIMEOUT];
    if bad.iter().any(|b| content.contains(b)) {
        return (StatusMap::new(), false);
    }
    if !(content.contains(START_TEST_OUTPUT) && content.contains(END_TEST_OUTPUT)) {
        return (StatusMap::new(), false);
    }
    let mut sm = parser.parse(sliced(content));
    if sm.is_empty() {
        sm = parser.parse(content);
    }
    if sem == Semantics::Classic {
        return (sm, true);
    }
    if sm.is_empty() && !SUITE_RAN.is_match(content) {
        return (StatusMap::new(), false);
    }
    let exit = parse_test_exit_code(content);
    if exit.is_some_and(|c| c != 0)
        && !sm.is_empty()
        && !sm.iter().any(|(_, s)| s == FAILED || s == ERROR)
    {
        return (StatusMap::new(), false);
    }
    (sm, true)
}

/// Derive FAIL_TO_PASS / PASS_TO_PASS from a run with the test patch only (`before`) and one
/// with the gold patch too (`after`), as SWE-bench-style validation does: F2P = `PASSED` after
/// and `FAILED`/`ERROR` (or absent) before; P2P = `PASSED` both times. Both sorted (byte
/// order, as Python's `sorted`), so the lists do not depend on the order the tests ran in.
///
/// Stricter than grading on purpose, so a frozen list names tests that really ran and passed:
/// - `XFAIL` and `SKIPPED` tests are in neither list (grading counts an `XFAIL` as a pass, so
///   freezing one would make a task pass on a test that asserts nothing);
/// - keys that [`is_truncated_id`] flags are left out: the official pytest parser cuts an id
///   at its first whitespace, so `test_x[a b]` and `test_x[a c]` collapse into one key
///   `test_x[a` whose status is whichever line came last; such a key names no single test.
///
/// These tests still run; they are just not graded. This is how the bundled benchmark's
/// lists were computed (`tasksets/mini/README.md`), and `dojo validate --write` reproduces
/// them exactly.
pub fn derive_lists(before: &StatusMap, after: &StatusMap) -> (Vec<String>, Vec<String>) {
    let mut f2p = Vec::new();
    let mut p2p = Vec::new();
    for (k, s) in after.iter() {
        if s != PASSED || is_truncated_id(k) {
            continue;
        }
        match before.get(k) {
            Some(PASSED) => p2p.push(k.to_string()),
            None | Some(FAILED | ERROR) => f2p.push(k.to_string()),
            Some(_) => {}
        }
    }
    f2p.sort();
    p2p.sort();
    (f2p, p2p)
}

/// A parametrized pytest id that the official parser cut at whitespace: more `[` than `]`
/// (`test_tokenize[use of colon]` is logged as `test_tokenize[use`).
pub fn is_truncated_id(key: &str) -> bool {
    key.matches('[').count() > key.matches(']').count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semantics_names() {
        assert_eq!("5.x".parse(), Ok(Semantics::Swebench5));
        assert_eq!(
            "x".parse::<Semantics>().unwrap_err().to_string(),
            "--semantics \"x\": expected classic or swebench5"
        );
    }

    fn sm(pairs: &[(&str, &str)]) -> StatusMap {
        let mut m = StatusMap::new();
        for (k, v) in pairs {
            m.insert(*k, *v);
        }
        m
    }
    fn v(xs: &[&str]) -> Vec<String> {
        xs.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn classic_vs_5x_on_skipped() {
        let m = sm(&[("f", SKIPPED), ("p", SKIPPED)]);
        let (f2p, p2p) = (v(&["f"]), v(&["p"]));
        let gold = GoldLists {
            fail_to_pass: &f2p,
            pass_to_pass: &p2p,
            ..Default::default()
        };
        let c = eval_tests_report(&m, &gold, false, EvalType::PassAndFail, Semantics::Classic);
        assert!(c.fail_to_pass.success.is_empty() && c.fail_to_pass.failure.is_empty());
        assert_eq!(resolution_status(&c), ResolvedStatus::Full);
        let n = eval_tests_report(
            &m,
            &gold,
            false,
            EvalType::PassAndFail,
            Semantics::Swebench5,
        );
        assert_eq!(n.fail_to_pass.failure, ["f"]);
        assert_eq!(n.pass_to_pass.success, ["p"]);
        assert_eq!(resolution_status(&n), ResolvedStatus::No);
    }

    #[test]
    fn partial_and_truncated_ids() {
        let m = sm(&[
            ("a", PASSED),
            ("b", FAILED),
            ("t[x(1", FAILED),
            ("t[x(1)]", PASSED),
            ("u[y(1)]", PASSED),
        ]);
        let (f2p, p2p) = (v(&["a", "b"]), v(&["u[y("]));
        let gold = GoldLists {
            fail_to_pass: &f2p,
            pass_to_pass: &p2p,
            ..Default::default()
        };
        let n = eval_tests_report(
            &m,
            &gold,
            false,
            EvalType::PassAndFail,
            Semantics::Swebench5,
        );
        assert_eq!(n.pass_to_pass.success, ["u[y("]);
        assert_eq!(resolution_status(&n), ResolvedStatus::Partial);
        // Classic: `u[y(` is not cut at a space of `u[y(1)]`: 2.x–4.x never matched it.
        let c = eval_tests_report(&m, &gold, false, EvalType::PassAndFail, Semantics::Classic);
        assert_eq!(c.pass_to_pass.failure, ["u[y("]);
        assert_eq!(resolution_status(&c), ResolvedStatus::No);
    }

    /// An id the dataset cut at a space (astropy's `test_unit_grammar_fail[sin(`): both
    /// semantics match the logged name, as the official graders of both eras did.
    #[test]
    fn ids_cut_at_a_space_match_under_both_semantics() {
        let m = sm(&[
            ("t.py::test_fail[sin( x)]", PASSED),
            ("t.py::test_ok", PASSED),
        ]);
        let (f2p, p2p) = (v(&["t.py::test_ok"]), v(&["t.py::test_fail[sin("]));
        let gold = GoldLists {
            fail_to_pass: &f2p,
            pass_to_pass: &p2p,
            ..Default::default()
        };
        for sem in [Semantics::Classic, Semantics::Swebench5] {
            let r = eval_tests_report(&m, &gold, false, EvalType::PassAndFail, sem);
            assert_eq!(r.pass_to_pass.success, ["t.py::test_fail[sin("], "{sem:?}");
            assert_eq!(resolution_status(&r), ResolvedStatus::Full, "{sem:?}");
        }
        // Cut names that disagree on pass vs fail: not resolved to either.
        let m = sm(&[
            ("t.py::test_fail[sin( x)]", PASSED),
            ("t.py::test_fail[sin( y)]", FAILED),
        ]);
        let r = eval_tests_report(&m, &gold, false, EvalType::PassAndFail, Semantics::Classic);
        assert_eq!(r.pass_to_pass.failure, ["t.py::test_fail[sin("]);
    }

    #[test]
    fn logs_eval_markers_and_5x_checks() {
        let log = "x\n+ : '>>>>> Start Test Output'\nPASSED a\n+ : '>>>>> End Test Output'\n>>>>> Test Exit Code: 1\n";
        let (m, ok) = logs_eval(log, Parser::Pytest, Semantics::Classic);
        assert!(ok && m.get("a") == Some(PASSED));
        // 5.x: non-zero exit with no failure in the map is not valid output.
        assert!(!logs_eval(log, Parser::Pytest, Semantics::Swebench5).1);
        assert!(!logs_eval("PASSED a\n", Parser::Pytest, Semantics::Classic).1);
        assert!(
            !logs_eval(
                &format!("{log}{TESTS_TIMEOUT}"),
                Parser::Pytest,
                Semantics::Classic
            )
            .1
        );
        assert_eq!(parse_test_exit_code(">>>>> Test Exit Code: -9"), Some(-9));
        assert_eq!(read_log_text(b"a\r\nb\rc\xff"), "a\nb\nc\u{fffd}");
    }

    #[test]
    fn derive_lists_from_two_runs() {
        let before = sm(&[
            ("a", FAILED),
            ("b", PASSED),
            ("c", PASSED),
            ("e", ERROR),
            ("s", SKIPPED),
            ("x", XFAIL),
        ]);
        let after = sm(&[
            ("a", PASSED),
            ("b", PASSED),
            ("c", FAILED),
            ("d", XFAIL),
            ("e", PASSED),
            ("s", PASSED),
            ("x", XFAIL),
            ("t[cut", PASSED),
            ("t[ok]", PASSED),
        ]);
        let (f2p, p2p) = derive_lists(&before, &after);
        assert_eq!(f2p, ["a", "e", "t[ok]"]);
        assert_eq!(p2p, ["b"]);
        assert!(is_truncated_id("t.py::test_tokenize[use"));
        assert!(!is_truncated_id("t.py::test_tokenize[x-y]"));
        assert!(!is_truncated_id("test_x (mod.Class)"));
    }
}
