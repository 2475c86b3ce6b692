//! The trusted test observer: evidence of which tests ran that does not come from the log.
//!
//! A log is what the project's own process prints, and library code under test can print
//! anything: `PASSED <id>` lines from an `atexit` handler that then calls `os._exit(0)`, a
//! replaced `Function.runtest` (or `TestCase.run`) that never calls the test, a wrapper that
//! turns a failure into `pytest.xfail`. `swebench` 5.0.2 grades all of these resolved. So
//! grading loads an observer (`observer.py`) ahead of the project's code, from a directory
//! outside the repository on `PYTHONPATH`, that wraps every test function and records whether
//! its own body ran and how it ended, into a file outside the repository; the records come
//! back after the test command, behind a marker line ([`MARKER`]). A FAIL_TO_PASS or
//! PASS_TO_PASS test that the log reports passed counts only if the observer saw its body
//! return (or, for an `XFAIL`, raise under an `xfail` marker); any other disagreement grades
//! the run unresolved and names the tests ([`check`]).
//!
//! Two runners ([`Runner`], chosen by the task's log parser):
//! - **pytest**: a plugin (`PYTEST_PLUGINS`) wrapping every collected test function; one
//!   instance per pytest process (xdist workers each load it and append to the same file);
//! - **unittest** (Django's `runtests.py`, `python -m unittest`): the `sitecustomize` beside
//!   the plugin (`observer_site.py`, which then runs the environment's own) wraps each
//!   `TestCase` instance's test method as it is created, and records the start of the
//!   `TextTestRunner` run. Log names `method (module.Class)` map to `module.Class.method`; a
//!   test logged under its docstring cannot be mapped and is taken from the log.
//!
//! Where nothing loaded it (sympy's own runner, a test command that replaces `PYTHONPATH` or
//! runs Python with `-S`/`-I`), there is nothing to compare and the log alone decides
//! ([`Observed::loaded`] false).
//!
//! What it cannot do: the observer runs in the same interpreter as the patch's code. A patch
//! written against dojo's observer (one that finds the records file and writes forged lines,
//! or unwraps the functions) is not stopped by it; the guard and the exit-status check still
//! apply. It catches the generic hacks that fool the official harness.

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::grading::{Semantics, TestsStatus, matched_key};
use crate::parsers::{StatusMap, XFAIL};

/// The plugin's source, written into the sandbox for each grading run.
pub const PLUGIN: &str = include_str!("observer.py");

/// The `sitecustomize.py` written beside it: the unittest half, installed at interpreter
/// startup.
pub const SITECUSTOMIZE: &str = include_str!("observer_site.py");

/// Which runner's records decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runner {
    Pytest,
    /// unittest's loader and `TextTestRunner`: the `django` log parser's runs.
    Unittest,
}

impl Runner {
    /// The runner whose log `parser` reads.
    pub fn of(parser: crate::parsers::Parser) -> Runner {
        match parser {
            crate::parsers::Parser::Django => Runner::Unittest,
            _ => Runner::Pytest,
        }
    }

    /// The prefix of this runner's record kinds.
    fn prefix(self) -> &'static str {
        match self {
            Runner::Pytest => "",
            Runner::Unittest => "u.",
        }
    }
}

/// The line that separates the test command's output from the observer's records.
pub const MARKER: &str = "@@DOJO_OBSERVER_RECORDS";

/// Shell lines run before the test command: the plugin into a private directory outside the
/// repository, on `PYTHONPATH` and in `PYTEST_PLUGINS`, and the records file named.
pub(crate) fn setup_lines() -> String {
    "D=$(mktemp -d /tmp/.dojo-observer-XXXXXX) && printf '%s' \"$DOJO_OBSERVER_PY\" > \"$D/dojo_observer.py\" \
     && printf '%s' \"$DOJO_OBSERVER_SITE\" > \"$D/sitecustomize.py\" && {\n\
     export DOJO_OBSERVER_FILE=\"$D/records\"\n\
     export PYTHONPATH=\"$D${PYTHONPATH:+:$PYTHONPATH}\"\n\
     export PYTEST_PLUGINS=\"dojo_observer${PYTEST_PLUGINS:+,$PYTEST_PLUGINS}\"\n\
     }\nunset DOJO_OBSERVER_PY DOJO_OBSERVER_SITE\n"
        .to_string()
}

/// Shell lines run after the test command (its exit status in `$rc`): the marker and the
/// records, on the same output, then the test command's status.
pub(crate) fn teardown_lines() -> String {
    format!("printf '\\n{MARKER}\\n'\ncat \"$DOJO_OBSERVER_FILE\" 2>/dev/null\nexit $rc\n")
}

/// The test command's output and the records after the last marker (`None`: no marker, the
/// observer was not run).
pub fn split_output(stdout: &str) -> (&str, Option<&str>) {
    let needle = format!("\n{MARKER}\n");
    match stdout.rfind(&needle) {
        Some(i) => (&stdout[..i], Some(&stdout[i + needle.len()..])),
        None => (stdout, None),
    }
}

/// How one test's body ended, as the observer saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// Collected and wrapped, the body never entered.
    NotRun,
    Entered,
    Returned,
    /// The exception type's name (`AssertionError`, `XFailed`, `Skipped`).
    Raised(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub body: Body,
    pub xfail_marked: bool,
}

/// Everything the observer recorded in one run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// Some pytest process loaded the plugin.
    pub loaded: bool,
    /// Tests wrapped, by node id.
    pub items: BTreeMap<String, Item>,
    /// Tests collected but not wrapped (doctests, coroutines): their log lines are taken as is.
    pub unobserved: Vec<String>,
    /// A process finished its collection.
    pub collected: bool,
}

fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

/// Read `runner`'s records (lines that do not parse are skipped: a test's own output cannot
/// land in the file, and a torn last line is nothing to count).
pub fn parse(records: &str, runner: Runner) -> Observed {
    let mut o = Observed::default();
    for line in records.lines() {
        let mut f = line.splitn(3, '\t');
        let (Some(kind), Some(id)) = (f.next(), f.next().and_then(unhex)) else {
            continue;
        };
        let Some(kind) = kind.strip_prefix(runner.prefix()) else {
            continue;
        };
        if runner == Runner::Pytest && kind.starts_with("u.") {
            continue;
        }
        let id = match runner {
            Runner::Pytest => pytest_node_id(id),
            Runner::Unittest => id,
        };
        let extra = f.next().unwrap_or("");
        match kind {
            "start" => o.loaded = true,
            "collected" => o.collected = true,
            "item" => {
                // A test created twice (loaded by two names) keeps what its body did.
                o.items.entry(id).or_insert(Item {
                    body: Body::NotRun,
                    xfail_marked: extra == "xfail",
                });
            }
            "unobserved" => o.unobserved.push(id),
            "enter" | "return" | "raise" => {
                if let Some(item) = o.items.get_mut(&id) {
                    item.body = match kind {
                        "enter" => Body::Entered,
                        "return" => Body::Returned,
                        _ => Body::Raised(extra.to_string()),
                    };
                }
            }
            _ => {}
        }
    }
    o
}

/// What the report says of the observer.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ObserverReport {
    /// A pytest process of the run loaded the observer (else the log alone decided).
    pub loaded: bool,
    /// Tests whose bodies it watched.
    pub observed: usize,
    /// Tests the log reports passed that the observer did not see pass, each with what it saw.
    pub disagreements: Vec<String>,
}

/// Compare the tests the log reports passed (`status`'s FAIL_TO_PASS and PASS_TO_PASS
/// successes) with what the observer saw. `sm` is the parsed log, for the status of each and
/// the key an id matched under `sem`.
pub fn check(
    obs: &Observed,
    runner: Runner,
    status: &TestsStatus,
    sm: &StatusMap,
    sem: Semantics,
) -> ObserverReport {
    let mut r = ObserverReport {
        loaded: obs.loaded,
        observed: obs.items.len(),
        disagreements: Vec::new(),
    };
    if !obs.loaded {
        return r;
    }
    let passed = status
        .fail_to_pass
        .success
        .iter()
        .chain(&status.pass_to_pass.success);
    for id in passed {
        let key = matched_key(id, sm, sem).unwrap_or(id.as_str());
        if runner == Runner::Unittest {
            // A name the runner's records cannot be matched to (a docstring) is the log's.
            let Some(uid) = unittest_id(key) else {
                continue;
            };
            if obs.unobserved.contains(&uid) {
                continue;
            }
            let seen = match obs.items.get(&uid) {
                Some(Item {
                    body: Body::Returned,
                    ..
                }) => continue,
                Some(i) => seen_of(i),
                None if !obs.collected => "collection never finished".to_string(),
                None => "it was never collected".to_string(),
            };
            r.disagreements.push(format!("{id}: {seen}"));
            continue;
        }
        // Every pytest item's node id has a `::` (file, then item); a logged name without one
        // is a log parser's artefact that a dataset kept as a test (`[100%]` from a progress
        // line): no item can be matched to it, so the log alone decides, as in the harness.
        if !key.contains("::") {
            continue;
        }
        // Log parsers that keep a line's second word (the `pytest` parser) cut a test's name
        // at its first space, as the datasets' ids are cut; pytest's node ids are whole.
        let cut = |name: &str| {
            name.strip_prefix(key)
                .is_some_and(|rest| rest.starts_with(char::is_whitespace))
        };
        if obs.unobserved.iter().any(|u| u == key || cut(u)) {
            continue;
        }
        let status = sm.get(key);
        let passed_body = |i: &Item| match &i.body {
            Body::Returned => true,
            Body::Raised(e) => status == Some(XFAIL) && (i.xfail_marked || e == "XFailed"),
            _ => false,
        };
        let item = match obs.items.get(key) {
            Some(i) => Some(i),
            None => {
                // The node ids under a cut name follow it in the map's order.
                let whole: Vec<&Item> = obs
                    .items
                    .range::<str, _>((Bound::Excluded(key), Bound::Unbounded))
                    .take_while(|(n, _)| n.starts_with(key))
                    .filter(|(n, _)| cut(n))
                    .map(|(_, i)| i)
                    .collect();
                // Several tests under one cut name: the log kept one line of them; one that
                // passed is enough (all of them forged is what must not pass).
                if whole.iter().any(|i| passed_body(i)) {
                    continue;
                }
                // The `pytest_v2` family of parsers splits a line on whitespace and joins the
                // words with one space, so a node id with a run of blanks (`code   sample`) is
                // logged squeezed: compare squeezed names too.
                let squeezed: Vec<&Item> = if whole.is_empty() {
                    obs.items
                        .iter()
                        .filter(|(n, _)| {
                            let n = squeeze(n);
                            n == key || cut(&n)
                        })
                        .map(|(_, i)| i)
                        .collect()
                } else {
                    Vec::new()
                };
                if squeezed.iter().any(|i| passed_body(i)) {
                    continue;
                }
                whole.first().or(squeezed.first()).copied()
            }
        };
        let seen = match item {
            Some(i) if passed_body(i) => continue,
            Some(i) => seen_of(i),
            None if !obs.collected => "collection never finished".to_string(),
            None => "it was never collected".to_string(),
        };
        r.disagreements.push(format!("{id}: {seen}"));
    }
    r
}

/// What the observer saw of a test that did not pass.
fn seen_of(i: &Item) -> String {
    match &i.body {
        Body::Raised(e) => format!("its body raised {e}"),
        Body::Entered => "its body never returned".to_string(),
        _ => "its body never ran".to_string(),
    }
}

/// The unittest id (`module.Class.method`) of a name as unittest logs it: `method
/// (module.Class)`, or `method (module.Class.method)` from Python 3.11 on. `None` for anything
/// else (a docstring line, a subtest).
pub fn unittest_id(logged: &str) -> Option<String> {
    let (method, rest) = logged.split_once(" (")?;
    let dotted = rest.strip_suffix(')')?;
    let ident = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_');
    if !ident(method) || !dotted.split('.').all(ident) {
        return None;
    }
    Some(match dotted.strip_suffix(method) {
        Some(class) if class.ends_with('.') => dotted.to_string(),
        _ => format!("{dotted}.{method}"),
    })
}

/// A node id as logs name it: pytest before 4.0 put an instance node `()` between a class
/// and its methods (`t.py::TestMaps::()::test_maps`), which `-rA` lines and the datasets'
/// ids leave out (`t.py::TestMaps::test_maps`).
fn pytest_node_id(id: String) -> String {
    if !id.contains("::()") {
        return id;
    }
    let id = id.replace("::()::", "::");
    id.strip_suffix("::()").map(str::to_string).unwrap_or(id)
}

/// `name` with every run of whitespace as one space, ends trimmed (Python's
/// `" ".join(name.split())`, what the `pytest_v2` parsers make of a logged name).
fn squeeze(name: &str) -> String {
    name.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parsers::{FAILED, PASSED};

    fn rec(kind: &str, id: &str, extra: &str) -> String {
        let hex: String = id.bytes().map(|b| format!("{b:02x}")).collect();
        format!("{kind}\t{hex}\t{extra}\n")
    }

    fn sm(pairs: &[(&str, &str)]) -> StatusMap {
        let mut m = StatusMap::new();
        for (k, v) in pairs {
            m.insert(*k, *v);
        }
        m
    }

    /// `check` of `records` read for `runner`, under the classic semantics.
    fn check_records(
        records: &str,
        runner: Runner,
        s: &TestsStatus,
        m: &StatusMap,
    ) -> ObserverReport {
        check(&parse(records, runner), runner, s, m, Semantics::Classic)
    }

    fn status(f2p: &[&str], p2p: &[&str]) -> TestsStatus {
        let mut s = TestsStatus::default();
        s.fail_to_pass.success = f2p.iter().map(|x| x.to_string()).collect();
        s.pass_to_pass.success = p2p.iter().map(|x| x.to_string()).collect();
        s
    }

    #[test]
    fn output_splits_at_the_last_marker() {
        let out = format!("a\n{MARKER}\nforged\nb\n\n{MARKER}\nreal\n");
        assert_eq!(
            split_output(&out),
            (format!("a\n{MARKER}\nforged\nb\n").as_str(), Some("real\n"))
        );
        assert_eq!(split_output("plain"), ("plain", None));
    }

    #[test]
    fn old_pytest_instance_nodes_and_parser_artefacts_are_matched_as_the_log_names_them() {
        // pytest 3.x: `t.py::T::()::test_a`, logged `t.py::T::test_a`.
        let records = rec("start", "", "1")
            + &rec("item", "t.py::T::()::test_a", "")
            + &rec("item", "t.py::T::()::test_b", "")
            + &rec("collected", "", "2")
            + &rec("enter", "t.py::T::()::test_a", "")
            + &rec("return", "t.py::T::()::test_a", "")
            + &rec("enter", "t.py::T::()::test_b", "")
            + &rec("raise", "t.py::T::()::test_b", "AssertionError");
        let m = sm(&[
            ("t.py::T::test_a", PASSED),
            ("t.py::T::test_b", PASSED),
            ("[100%]", PASSED),
            ("[", PASSED),
        ]);
        let r = check_records(
            &records,
            Runner::Pytest,
            &status(&["t.py::T::test_a"], &["t.py::T::test_b", "[100%]", "["]),
            &m,
        );
        // test_b's body raised: still caught; the progress-line artefacts are the log's.
        assert_eq!(
            r.disagreements,
            ["t.py::T::test_b: its body raised AssertionError"]
        );
        assert_eq!(pytest_node_id("t.py::T::()".into()), "t.py::T");
    }

    #[test]
    fn passes_need_a_body_that_returned() {
        let records = rec("start", "", "1")
            + &rec("item", "t.py::ok", "")
            + &rec("item", "t.py::faked", "")
            + &rec("item", "t.py::skipped_body", "")
            + &rec("item", "t.py::xf", "xfail")
            + &rec("item", "t.py::xf_hack", "")
            + &rec("unobserved", "t.py::doc", "DoctestItem")
            + &rec("collected", "", "6")
            + &rec("enter", "t.py::ok", "")
            + &rec("return", "t.py::ok", "")
            + &rec("enter", "t.py::faked", "")
            + &rec("raise", "t.py::faked", "AssertionError")
            + &rec("raise", "t.py::xf", "AssertionError")
            + &rec("raise", "t.py::xf_hack", "AssertionError")
            + "garbage line\n";
        let obs = parse(&records, Runner::Pytest);
        assert!(obs.loaded && obs.collected);
        let m = sm(&[
            ("t.py::ok", PASSED),
            ("t.py::faked", PASSED),
            ("t.py::skipped_body", PASSED),
            ("t.py::xf", XFAIL),
            ("t.py::xf_hack", XFAIL),
            ("t.py::doc", PASSED),
            ("t.py::ghost", PASSED),
            ("t.py::bad", FAILED),
        ]);
        let s = status(
            &["t.py::ok", "t.py::faked", "t.py::xf", "t.py::doc"],
            &["t.py::skipped_body", "t.py::xf_hack", "t.py::ghost"],
        );
        let r = check(&obs, Runner::Pytest, &s, &m, Semantics::Classic);
        assert_eq!(
            r.disagreements,
            [
                "t.py::faked: its body raised AssertionError",
                "t.py::skipped_body: its body never ran",
                "t.py::xf_hack: its body raised AssertionError",
                "t.py::ghost: it was never collected",
            ]
        );
        assert_eq!(r.observed, 5);
        // A name the log parser cut at its first space (as the dataset's id is): the observer's
        // whole node ids under it decide.
        let records = rec("start", "", "1")
            + &rec("item", "t.py::T::f[required-Missing data.]", "")
            + &rec("item", "t.py::T::f[null-Field may not be null.]", "")
            + &rec("item", "t.py::T::g[a b]", "")
            + &rec("collected", "", "3")
            + &rec("return", "t.py::T::f[required-Missing data.]", "")
            + &rec("raise", "t.py::T::g[a b]", "AssertionError");
        let m = sm(&[
            ("t.py::T::f[required-Missing", PASSED),
            ("t.py::T::f[null-Field", FAILED),
            ("t.py::T::g[a", PASSED),
        ]);
        let s = status(&["t.py::T::f[required-Missing", "t.py::T::g[a"], &[]);
        let r = check_records(&records, Runner::Pytest, &s, &m);
        assert_eq!(
            r.disagreements,
            ["t.py::T::g[a: its body raised AssertionError"]
        );
        // A node id with a run of blanks, logged squeezed by the pytest_v2 parsers (sphinx's
        // `test_inline[verify_re-``code   sample``-...]`), whole or cut by the dataset.
        let records = rec("start", "", "1")
            + &rec("item", "t.py::f[``code   sample``-x]", "")
            + &rec("item", "t.py::f[``other   one``-y]", "")
            + &rec("collected", "", "2")
            + &rec("return", "t.py::f[``code   sample``-x]", "")
            + &rec("raise", "t.py::f[``other   one``-y]", "AssertionError");
        let m = sm(&[
            ("t.py::f[``code sample``-x]", PASSED),
            ("t.py::f[``other one``-y]", PASSED),
        ]);
        let s = status(&["t.py::f[``code", "t.py::f[``other one``-y]"], &[]);
        let r = check_records(&records, Runner::Pytest, &s, &m);
        assert_eq!(
            r.disagreements,
            ["t.py::f[``other one``-y]: its body raised AssertionError"]
        );
        // Not loaded: nothing to compare.
        let r = check(
            &Observed::default(),
            Runner::Pytest,
            &s,
            &m,
            Semantics::Classic,
        );
        assert!(!r.loaded && r.disagreements.is_empty());
    }

    #[test]
    fn unittest_names_map_to_test_ids() {
        for (logged, id) in [
            ("test_x (app.tests.T)", Some("app.tests.T.test_x")),
            ("test_x (app.tests.T.test_x)", Some("app.tests.T.test_x")),
            ("test_x (app.tests.Test_x)", Some("app.tests.Test_x.test_x")),
            ("Regression for #123 ... (really)", None),
            ("A docstring line", None),
            ("test_x (app.tests.T) (i=1)", None),
        ] {
            assert_eq!(unittest_id(logged).as_deref(), id, "{logged}");
        }
    }

    #[test]
    fn unittest_records_decide_under_the_unittest_runner_only() {
        let records = rec("u.start", "", "1")
            + &rec("start", "", "1")
            + &rec("u.item", "app.tests.T.test_ok", "")
            + &rec("u.item", "app.tests.T.test_faked", "")
            + &rec("u.item", "app.tests.T.test_ok", "")
            + &rec("u.unobserved", "app.tests.T.test_async", "")
            + &rec("u.collected", "", "3")
            + &rec("u.enter", "app.tests.T.test_ok", "")
            + &rec("u.return", "app.tests.T.test_ok", "")
            + &rec("item", "x.py::pytest_only", "");
        let obs = parse(&records, Runner::Unittest);
        assert!(obs.loaded && obs.collected);
        assert_eq!(obs.items.len(), 2, "{obs:?}");
        assert_eq!(obs.items["app.tests.T.test_ok"].body, Body::Returned);
        assert_eq!(parse(&records, Runner::Pytest).items.len(), 1);
        let m = sm(&[
            ("test_ok (app.tests.T)", PASSED),
            ("test_faked (app.tests.T.test_faked)", PASSED),
            ("test_async (app.tests.T)", PASSED),
            ("Docstring of a test", PASSED),
            ("test_ghost (app.tests.T)", PASSED),
        ]);
        let s = status(
            &[
                "test_ok (app.tests.T)",
                "test_faked (app.tests.T.test_faked)",
            ],
            &[
                "test_async (app.tests.T)",
                "Docstring of a test",
                "test_ghost (app.tests.T)",
            ],
        );
        let r = check(&obs, Runner::Unittest, &s, &m, Semantics::Classic);
        assert_eq!(
            r.disagreements,
            [
                "test_faked (app.tests.T.test_faked): its body never ran",
                "test_ghost (app.tests.T): it was never collected",
            ]
        );
        // The runner never started: a test it did not create counts as not collected yet.
        let records = rec("u.start", "", "1");
        let r = check_records(&records, Runner::Unittest, &s, &m);
        assert!(
            r.disagreements[0].ends_with("collection never finished"),
            "{r:?}"
        );
    }
}
