//! Checking a run's log against what the observer saw: every test the log reports passed must
//! have been seen passing (its pristine body entered and returned), and a skip the log reports
//! must be one the observer saw raised by the test's own skip.

use super::*;

/// What the observer saw of a test that was not collected, by whether collection finished.
fn not_collected(obs: &Observed) -> Seen {
    if obs.collected {
        Seen::NeverCollected
    } else {
        Seen::CollectionUnfinished
    }
}

impl ObserverReport {
    /// Nothing the observer saw contradicts the log.
    pub fn agrees(&self) -> bool {
        self.problems.is_empty() && self.disagreements.is_empty()
    }
}

/// Compare the tests the log reports passed (`status`'s FAIL_TO_PASS and PASS_TO_PASS
/// successes) with what the observer saw. `sm` is the parsed log, for the status of each and
/// the key an id matched under `sem`. Every passed test must have been seen passing, and the
/// run itself must have loaded the observer, kept its records intact and finished.
///
/// A pytest id in a file the observer did not read at startup (not one of the task's test
/// files, or one that does not exist: a test of an inner session that pytester ran in the same
/// process and the outer run logged, `test_capsysbinary.py::test_hello`) is the log's.
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
        problems: obs
            .tampered
            .iter()
            .map(|t| format!("records forged: {t}"))
            .collect(),
        disagreements: Vec::new(),
    };
    if !obs.loaded && obs.tampered.is_empty() {
        r.problems.push(
            "the test observer did not load in the test runner's interpreter (a test command \
             running another Python, or `python -S`)"
                .into(),
        );
        return r;
    }
    for a in &obs.audits {
        r.problems.push(format!(
            "the test process reached into the test machinery: {a}"
        ));
    }
    if !obs.finished && obs.tampered.is_empty() {
        r.problems
            .push("the observed run never recorded its end (the runner exited early)".into());
    }
    let passed = status
        .fail_to_pass
        .success
        .iter()
        .chain(&status.pass_to_pass.success);
    for id in passed {
        let key = matched_key(id, sm, sem).unwrap_or(id.as_str());
        let disagreement = if runner != Runner::Pytest {
            check_named(obs, runner, id, key)
        } else {
            check_pytest(obs, sm, id, key)
        };
        r.disagreements.extend(disagreement);
    }
    r
}

/// The exception names runners report a test skipped for (pytest's `Skipped`, unittest's
/// `SkipTest`, which nose and numpy re-export).
const SKIP_EXCEPTIONS: [&str; 2] = ["Skipped", "SkipTest"];

/// The skipped tests of the task's lists, against what the observer saw (classic grading
/// counts a skipped test as neither passed nor failed, so a skip would let a broken test
/// through):
/// - a FAIL_TO_PASS test reported skipped is a disagreement: the gold patch made it pass;
/// - a PASS_TO_PASS test reported skipped whose body the observer saw raise something other
///   than a skip (a failure the run turned into a skip) is one. One skipped before its body
///   ran (a skip marker or decorator, a skipping `setUp`) is the log's: environments skip
///   tests the gold run skipped too.
///
/// Empty when the observer did not load (then [`check`] has the problem).
pub fn check_skips(
    obs: &Observed,
    runner: Runner,
    gold: &crate::grading::GoldLists,
    sm: &StatusMap,
    sem: Semantics,
) -> Vec<Disagreement> {
    if !obs.loaded {
        return Vec::new();
    }
    fn skipped<'a>(id: &'a str, sm: &'a StatusMap, sem: Semantics) -> Option<&'a str> {
        let key = matched_key(id, sm, sem).unwrap_or(id);
        (sm.get(key) == Some(SKIPPED)).then_some(key)
    }
    let mut out: Vec<Disagreement> = gold
        .fail_to_pass
        .iter()
        .filter(|id| skipped(id, sm, sem).is_some())
        .map(|id| Disagreement::new(id, Seen::Skipped))
        .collect();
    for id in gold.pass_to_pass {
        let Some(key) = skipped(id, sm, sem) else {
            continue;
        };
        let uid = match runner {
            Runner::Unittest => unittest_id(key).or_else(|| {
                let ids = obs.docs.get(key)?;
                ids.iter().find(|i| obs.items.contains_key(*i)).cloned()
            }),
            _ => Some(key.to_string()),
        };
        let item = uid.as_ref().and_then(|u| obs.items.get(u));
        if let Some(Item {
            body: Body::Raised { exception, .. },
            ..
        }) = item
            && !SKIP_EXCEPTIONS.contains(&exception.as_str())
        {
            let seen = Seen::SkippedAfterRaising {
                exception: exception.clone(),
            };
            out.push(Disagreement::new(id, seen));
        }
    }
    out
}

/// A unittest or sympy test `id` the log reports passed, matched under `key`: what the
/// observer saw that contradicts it, if anything.
fn check_named(obs: &Observed, runner: Runner, id: &str, key: &str) -> Option<Disagreement> {
    // A name matched to no record, and no docstring of a restored test file's test, is
    // the log's (a test the observer does not watch).
    let uid = match runner {
        Runner::Unittest => unittest_id(key).or_else(|| {
            // A name logged from a docstring. Several tests may share one (a mixin's
            // test in each backend's class): the log kept one line of theirs, which
            // need not be the last run's (a test whose error output split its line
            // left none), so one of them returning is enough, as with pytest's cut
            // names; none did: the one that ran last is named.
            obs.docs.get(key).and_then(|ids| {
                let returned = |i: &&String| {
                    obs.items
                        .get(*i)
                        .is_some_and(|it| it.body == Body::Returned)
                };
                ids.iter()
                    .find(returned)
                    .or_else(|| {
                        ids.iter()
                            .max_by_key(|i| obs.items.get(*i).and_then(|it| it.entered))
                    })
                    .cloned()
            })
        }),
        _ => Some(key.to_string()),
    };
    let Some(uid) = uid else {
        // A docstring of a test in a restored file that no observed test carries: that
        // test was never created (other names are the log's, as unobserved tests).
        if runner == Runner::Unittest && obs.file_docs.contains(key) {
            return Some(Disagreement::new(id, not_collected(obs)));
        }
        return None;
    };
    if let Some(why) = obs.replaced.get(&uid) {
        return Some(Disagreement::new(id, Seen::Replaced { why: why.clone() }));
    }
    // An observed test decides, whatever unobserved test shares its id (a twin class whose
    // module and qualname split the id another way, run after it: a third review).
    let seen = match obs.items.get(&uid) {
        Some(Item {
            body: Body::Returned,
            ..
        }) => return None,
        Some(i) => seen_of(i),
        None if obs.unobserved.contains(&uid) => return None,
        None => not_collected(obs),
    };
    Some(Disagreement::new(id, seen))
}

/// A pytest test `id` the log reports passed, matched under `key` (`sm` for its status): what
/// the observer saw that contradicts it, if anything.
fn check_pytest(obs: &Observed, sm: &StatusMap, id: &str, key: &str) -> Option<Disagreement> {
    // Every pytest item's node id has a `::` (file, then item); a logged name without one
    // is a log parser's artefact that a dataset kept as a test (`[100%]` from a progress
    // line): no item can be matched to it, so the log alone decides, as in the harness.
    if !key.contains("::") {
        return None;
    }
    let file = key.split("::").next().unwrap_or(key);
    if !obs.files.iter().any(|f| f == file) {
        return None;
    }
    // Log parsers that keep a line's second word (the `pytest` parser) cut a test's name
    // at its first space, as the datasets' ids are cut; pytest's node ids are whole.
    let cut = |name: &str| {
        name.strip_prefix(key)
            .is_some_and(|rest| rest.starts_with(char::is_whitespace))
    };
    // A node id the log names by `key`: whole, cut, or as the parsers log it (squeezed,
    // a path parameter shortened) and then whole or cut.
    let names = |n: &str| {
        n == key || cut(n) || {
            let logged = as_logged(n);
            logged == key || cut(&logged)
        }
    };
    if let Some((_, why)) = obs.replaced.iter().find(|(n, _)| names(n)) {
        return Some(Disagreement::new(id, Seen::Replaced { why: why.clone() }));
    }
    // Unobserved tests are the log's, whatever their names look like in it (sphinx-8621's
    // `test_inline[verify-.. glossary::\n\n   term1...]`, logged squeezed and matched whole);
    // but an observed test of exactly the logged name decides, whatever unobserved items share
    // its cut or squeezed name (an item made at run time as `test_x ` must not excuse `test_x`).
    // The unobserved item's own file part must be the logged one (an item renamed
    // ` tests/t.py::test_x` is no restored file's, yet logged squeezed as `tests/t.py::test_x`).
    let same_file = |u: &str| u.split("::").next() == Some(file);
    if !obs.items.contains_key(key) && obs.unobserved.iter().any(|u| same_file(u) && names(u)) {
        return None;
    }
    let status = sm.get(key);
    let passed_body = |i: &Item| match &i.body {
        Body::Returned => true,
        Body::Raised { expected, .. } => status == Some(XFAIL) && *expected,
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
                return None;
            }
            // The `pytest_v2` family of parsers splits a line on whitespace and joins the
            // words with one space, so a node id with a run of blanks (`code   sample`) is
            // logged squeezed: compare squeezed names too.
            let squeezed: Vec<&Item> = if whole.is_empty() {
                obs.items
                    .iter()
                    .filter(|(n, _)| names(n))
                    .map(|(_, i)| i)
                    .collect()
            } else {
                Vec::new()
            };
            if squeezed.iter().any(|i| passed_body(i)) {
                return None;
            }
            whole.first().or(squeezed.first()).copied()
        }
    };
    let seen = match item {
        Some(i) if i.reentered => Seen::RunAgain,
        Some(i) if passed_body(i) => return None,
        Some(i) => seen_of(i),
        None => not_collected(obs),
    };
    Some(Disagreement::new(id, seen))
}

/// What the observer saw of a test that did not pass.
fn seen_of(i: &Item) -> Seen {
    match &i.body {
        Body::Raised { exception, .. } => Seen::Raised {
            exception: exception.clone(),
        },
        Body::Entered => Seen::NeverReturned,
        _ => Seen::NeverRan,
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
pub(super) fn pytest_node_id(id: String) -> String {
    if !id.contains("::()") {
        return id;
    }
    let id = id.replace("::()::", "::");
    id.strip_suffix("::()").map(str::to_string).unwrap_or(id)
}

/// A node id as the official parsers log it: runs of blanks squeezed ([`squeeze`]), and a
/// parameter that is an absolute path cut to its last component (`parse_log_pytest_options`:
/// `test_stdin[/tmp/x/mymodule.py]` is logged `test_stdin[/mymodule.py]`, pylint's and
/// requests' datasets list it so; several node ids may share the logged name).
pub(super) fn as_logged(name: &str) -> String {
    let name = squeeze(name);
    let (Some(open), Some(close)) = (name.find('['), name.rfind(']')) else {
        return name;
    };
    if close < open {
        return name;
    }
    let option = &name[open + 1..close];
    if option.starts_with('/') && !option.starts_with("//") && !option.contains('*') {
        let last = option.rsplit('/').next().unwrap_or(option);
        return format!("{}[/{last}]", &name[..open]);
    }
    format!("{}[{option}]", &name[..open])
}

/// `name` with every run of whitespace as one space, ends trimmed (Python's
/// `" ".join(name.split())`, what the `pytest_v2` parsers make of a logged name).
fn squeeze(name: &str) -> String {
    name.split_whitespace().collect::<Vec<_>>().join(" ")
}
