//! The trusted test observer: evidence of which tests ran that does not come from the log.
//!
//! A log is what the project's own process prints, and library code under test can print
//! anything: `PASSED <id>` lines from an `atexit` handler that then calls `os._exit(0)`, a
//! replaced `Function.runtest` (or `TestCase.run`) that never calls the test, a wrapper that
//! turns a failure into `pytest.xfail`. `swebench` 5.0.2 grades all of these resolved. So
//! grading runs an observer (`observer.py`) in the test runner's interpreter, ahead of the
//! project's code, that wraps every test function and records whether its own body ran and
//! how it ended. A FAIL_TO_PASS or PASS_TO_PASS test that the log reports passed counts only if
//! the observer saw its body return (or, for an `XFAIL`, raise as an expected failure); any
//! other disagreement grades the run unresolved and names the tests ([`check`]).
//!
//! How it stays out of the patch's reach:
//! - **Loading.** [`install`] puts the observer and a one-line `.pth` file in the environment's
//!   site-packages (read-only inside the sandbox), so every interpreter of the environment runs
//!   it at startup whatever the test command does to `PYTHONPATH` or `PYTEST_PLUGINS`; it stays
//!   idle unless grading names a run. A run where the runner's interpreter did not load it (a
//!   test command using another Python, `python -S`) is unresolved with the reason, never "the
//!   log decides".
//! - **Pristine tests.** At startup, before any project code, it reads the task's test files
//!   (restored by grading) and compiles them, plain and as pytest's assertion rewriter does
//!   (before the first conftest); a test function counts only if its code is that file's code
//!   (or, for a test the file decorates with a wrapping decorator, a wrapper that keeps that
//!   code: see the next point), still is at entry and return, and the file's module-level helpers and the
//!   runners' assertion helpers (`pytest`, `_pytest.python_api`, `_pytest.outcomes`,
//!   `unittest.case`) are unchanged. An `XFailed` counts as expected only under an xfail marker
//!   in the test's own file, or raised by `pytest.xfail()` called from that file's code.
//! - **Decorated tests.** A wrapper is the project's or a library's code, which a patch can
//!   change to swallow the test's failure. The observer puts a recorder where the wrapper keeps
//!   the test's function (`__wrapped__`, its closure, a decorator object's attributes); the
//!   test passes only if the wrapper returned and the test's own code returned inside it at
//!   least once, or, under a `@raises(E)` of the pristine file, raised `E` from its own body
//!   and never returned. A call through a reference the observer did not find is never
//!   recorded: fail closed.
//! - **Records.** They go to a pipe the grading side reads (the script's stderr, fd 4 of the
//!   test command; never a file), each numbered per process and carrying an HMAC-SHA256 under a
//!   per-run key ([`RunKey`]) that reaches the runner's interpreter through a one-shot pipe on
//!   fd 5 (the first interpreter to start takes it; the key is in no environment variable or
//!   file). An interpreter that holds the key, runs no tests and has loaded nothing of the
//!   repository (`tox --current-env`, SWE-bench's sphinx command) hands it to the Python
//!   processes it starts; a test runner never does. A record with a wrong MAC or number, or a
//!   process that collected tests without recording their end, makes the run unresolved. A
//!   test's wrapping and its body's start are written with its end (one write a test: each
//!   write wakes this side's reader); a process that dies between them leaves that test never
//!   collected or never run, which no test passes by. What the observer calls after project
//!   code may run (`hmac.new`, `os.write`, `sys.gettrace`, the builtins) is bound at startup.
//! - **Audit.** An audit hook (it cannot be removed) flags a tracer set inside a test body, a
//!   test file's function given other code, and garbage-collector walks outside test bodies.
//!
//! Three runners ([`Runner`], chosen by the task's log parser): **pytest** (a plugin registered
//! with the run's own plugin manager as pytest creates it) and **unittest** (Django's
//! `runtests.py`, `python -m unittest`: each `TestCase` instance's test method is wrapped as it
//! is created; log names `method (module.Class)` map to `module.Class.method`, a test logged
//! under its docstring, as Django's runner logs it, maps through the docstring records: the one
//! whose body ran last, and a docstring of a restored file's test that no observed test
//! carries was never collected) and **sympy's own runner**
//! (`bin/test`: the functions of each test file's namespace are wrapped as the runner `exec`s
//! it; `PYTHONHASHSEED` is set so that the runner stays in the observed process; its
//! assertion helpers, which live in the repository, are compiled at startup and must be
//! unchanged when a test returns).
//!
//! What it cannot do: it runs in the same interpreter as the patch's code. Code written against
//! it can find the key in the observer's memory (or in the shell's, through `/proc/<pid>/mem`)
//! and forge a consistent record stream, or make values compare equal to anything; the README's
//! table lists what remains and what it costs an attacker.

use std::collections::BTreeMap;
use std::io::Read;
use std::ops::Bound;

use crate::grading::{Semantics, TestsStatus, matched_key};
use crate::parsers::{SKIPPED, StatusMap, XFAIL};

mod check;
mod install;
#[cfg(test)]
use check::as_logged;
use check::pytest_node_id;
pub use check::{check, check_skips, unittest_id};
pub use install::{InstallError, OBSERVER_PY, install};

/// A grading run's secret: 32 random bytes, as 64 hex digits (the HMAC key is those digits'
/// bytes, on both sides).
#[derive(Clone)]
pub struct RunKey(String);

impl std::fmt::Debug for RunKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RunKey(..)")
    }
}

impl RunKey {
    pub fn new() -> std::io::Result<RunKey> {
        let mut b = [0u8; 32];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
        Ok(RunKey(b.iter().map(|x| format!("{x:02x}")).collect()))
    }

    /// The 64 hex digits (what the script passes to the runner's interpreter).
    pub(crate) fn hex(&self) -> &str {
        &self.0
    }

    fn mac(&self, msg: &[u8]) -> String {
        hmac_sha256(self.0.as_bytes(), msg)[..16]
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect()
    }
}

/// HMAC-SHA256 (RFC 2104), over `sha2`, which the workspace already has: ten lines instead of
/// another crate.
fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut k = [0u8; 64];
    if key.len() > 64 {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(k.map(|b| b ^ 0x36));
    inner.update(msg);
    let mut outer = Sha256::new();
    outer.update(k.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

/// Which runner's records decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runner {
    Pytest,
    /// unittest's loader and `TextTestRunner`: the `django` log parser's runs.
    Unittest,
    /// sympy's own runner (`bin/test`, `SymPyTests`): the `sympy` log parser's runs.
    Sympy,
}

impl Runner {
    /// The runner whose log `parser` reads (every parser's runner is observed today; `None`
    /// is for one that is not).
    pub fn of(parser: crate::parsers::Parser) -> Option<Runner> {
        match parser {
            crate::parsers::Parser::Django => Some(Runner::Unittest),
            crate::parsers::Parser::Sympy => Some(Runner::Sympy),
            _ => Some(Runner::Pytest),
        }
    }

    /// The prefix of this runner's record kinds.
    fn prefix(self) -> &'static str {
        match self {
            Runner::Pytest => "",
            Runner::Unittest => "u.",
            Runner::Sympy => "s.",
        }
    }

    /// Environment the test command runs with under this runner's observer. sympy's
    /// `bin/test` re-runs itself in a subprocess only to randomise string hashes, unless
    /// `PYTHONHASHSEED` is set: a random seed set here keeps its tests in the process the
    /// observer watches, hashes as random as the harness's (and the seed is in its header).
    pub(crate) fn env(self) -> Option<(&'static str, String)> {
        match self {
            Runner::Sympy => Some(("PYTHONHASHSEED", hash_seed().to_string())),
            _ => None,
        }
    }
}

/// A random 32-bit seed (sympy's runner draws one with `random.randrange(2**32)`).
fn hash_seed() -> u32 {
    let mut b = [0u8; 4];
    match std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b)) {
        Ok(()) => u32::from_le_bytes(b),
        // No /dev/urandom: the clock's nanoseconds are random enough for hash order.
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0),
    }
}

/// The line (on the script's stderr) after which the observer's records come.
pub const MARKER: &str = "@@DOJO_OBSERVER_RECORDS";

/// Shell lines run after the setup, around the test command: fd 4 is the script's stderr (the
/// records' pipe), fd 5 a one-shot pipe holding the key (`DOJO_K`, read from stdin at the
/// start), `DOJO_OBSERVER_RUN` names both and the task's test files.
pub(crate) fn run_lines(test_cmd: &str, test_files: &[String]) -> String {
    let files = dojo_patch::shell_quote(&test_files.join("\n"));
    format!(
        "export DOJO_OBSERVER_RUN=\"4 5 \"{files}\nprintf '%s\\n' '{MARKER}' >&4\n\
         (\n{test_cmd}\n) 5<<<\"$DOJO_K\"\nrc=$?\nunset DOJO_K DOJO_OBSERVER_RUN\nexit $rc\n"
    )
}

/// The records after the marker on the script's stderr (`None`: no marker, the test command
/// never started under the observer).
pub fn split_records(stderr: &str) -> Option<&str> {
    let needle = format!("\n{MARKER}\n");
    stderr.find(&needle).map(|i| &stderr[i + needle.len()..])
}

/// How one test's body ended, as the observer saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    /// Collected and wrapped, the body never entered.
    NotRun,
    Entered,
    Returned,
    /// The exception type's name (`AssertionError`, `XFailed`, `Skipped`), and whether it is an
    /// expected failure (an xfail marker in the test's own file, or `pytest.xfail()` called
    /// from its code).
    Raised {
        exception: String,
        expected: bool,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub body: Body,
    pub xfail_marked: bool,
    /// When its body last started, in the order of all bodies' starts (`None`: never).
    pub entered: Option<usize>,
    /// pytest: its body was entered again after it raised.
    pub reentered: bool,
}

/// Everything the observer recorded in one run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// The runner's interpreter loaded the observer and took the run's key.
    pub loaded: bool,
    /// Tests wrapped, by node id.
    pub items: BTreeMap<String, Item>,
    /// Tests collected but not wrapped because no restored test file defines them (doctests,
    /// tests inherited from elsewhere, other plugins' items): their log lines are taken as is.
    pub unobserved: Vec<String>,
    /// Tests whose code is not their test file's, with why.
    pub replaced: BTreeMap<String, String>,
    /// A process finished its collection.
    pub collected: bool,
    /// The run's end was recorded (pytest's session finish, unittest's runner returning).
    pub finished: bool,
    /// Why the records cannot be trusted: a line without the run's MAC, out of order.
    pub tampered: Vec<String>,
    /// The test files the observer read at startup (relative to the workspace): the files
    /// whose tests it checks.
    pub files: Vec<String>,
    /// What the observer's audit hook saw the test process do that only code reaching into
    /// the test machinery does (a tracer set in a test body, a function's code replaced, the
    /// garbage collector walked outside test bodies).
    pub audits: Vec<String>,
    /// unittest: the first line of a test's docstring (the name a runner with descriptions
    /// on, Django's, logs the test under) -> the tests that have it.
    pub docs: BTreeMap<String, Vec<String>>,
    /// unittest: the first docstring lines of the test functions in the restored test files
    /// (read at startup): a log name among them belongs to a test the observer should have
    /// seen.
    pub file_docs: std::collections::BTreeSet<String>,
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

/// Read `runner`'s records, checking each line's number and MAC under `key`. Each process that
/// took the key writes its own stream (`pid`, then a number from 0); a line that fails either
/// check is a forgery (only the observer holds the key, and only it writes numbered lines):
/// reading stops there and the run is marked tampered.
pub fn parse(records: &str, runner: Runner, key: &RunKey) -> Observed {
    let mut o = Observed::default();
    let mut lines = records.split('\n').peekable();
    let mut next: BTreeMap<u64, u64> = BTreeMap::new();
    // Per process: it collected tests, it recorded their end.
    let mut streams: BTreeMap<u64, (bool, bool)> = BTreeMap::new();
    let mut n = 0usize;
    let mut entered = 0usize;
    while let Some(line) = lines.next() {
        if line.is_empty() && lines.peek().is_none() {
            break;
        }
        n += 1;
        let (pid, kind, id, extra) = match verify(line, n, key, &mut next) {
            Ok(r) => r,
            Err(forged) => {
                o.tampered.push(forged);
                break;
            }
        };
        let stream = streams.entry(pid).or_default();
        if kind.ends_with("collected") {
            stream.0 = true;
        }
        if kind.ends_with("finish") {
            stream.1 = true;
        }
        if kind == "start" {
            o.loaded = true;
            continue;
        }
        if kind == "audit" {
            o.audits.push(extra.to_string());
            continue;
        }
        if kind == "file" {
            let rel = id.strip_prefix(dojo_sandbox::WORKSPACE).unwrap_or(&id);
            o.files.push(rel.trim_start_matches('/').to_string());
            continue;
        }
        let Some(kind) = kind.strip_prefix(runner.prefix()) else {
            continue;
        };
        if runner == Runner::Pytest && kind.starts_with("u.") {
            continue;
        }
        let id = match runner {
            Runner::Pytest => pytest_node_id(id),
            Runner::Unittest => id,
            // sympy's log names a test by its function name alone (`file::name` recorded): a
            // name in two files keeps what the last body run did, as the log's last line does.
            Runner::Sympy => id
                .rsplit_once("::")
                .map_or(id.clone(), |(_, n)| n.to_string()),
        };
        if runner == Runner::Pytest
            && kind == "enter"
            && let Some(item) = o.items.get_mut(&id)
            && matches!(item.body, Body::Raised { .. })
        {
            // pytest runs an item's body once: entered again after it raised, something
            // called it a second time (with another case's arguments, say) for a return to
            // record.
            item.reentered = true;
        }
        record(&mut o, kind, id, extra, &mut entered);
    }
    // Every process that collected tests recorded their end.
    o.finished = streams.values().any(|s| s.0) && streams.values().all(|s| s.0 <= s.1);
    o
}

/// Line `n` of the records, checked: its MAC under `key`, its fields, and its number, due next
/// in its process's stream (`next`, advanced). Returns the process, kind, decoded id and extra
/// field; a line that fails a check is the `Err`, saying why.
fn verify<'l>(
    line: &'l str,
    n: usize,
    key: &RunKey,
    next: &mut BTreeMap<u64, u64>,
) -> Result<(u64, &'l str, String, &'l str), String> {
    let Some((body, mac)) = line.rsplit_once('\t') else {
        return Err(format!("line {n}: not a record"));
    };
    if key.mac(body.as_bytes()) != mac {
        return Err(format!("line {n}: does not carry the run's key"));
    }
    let f: Vec<&str> = body.splitn(5, '\t').collect();
    let [pid, seq, kind, id, extra] = f[..] else {
        return Err(format!("line {n}: malformed"));
    };
    let (Ok(pid), Ok(seq)) = (pid.parse::<u64>(), seq.parse::<u64>()) else {
        return Err(format!("line {n}: malformed numbers"));
    };
    let expected = next.entry(pid).or_insert(0);
    if seq != *expected {
        return Err(format!(
            "line {n}: process {pid}'s record {seq} where {expected} was due (out of order)"
        ));
    }
    *expected += 1;
    let Some(id) = unhex(id) else {
        return Err(format!("line {n}: malformed id"));
    };
    Ok((pid, kind, id, extra))
}

/// One of the runner's records (`kind` without its prefix) of test `id`, into `o`; `entered`
/// numbers the bodies in the order they were entered.
fn record(o: &mut Observed, kind: &str, id: String, extra: &str, entered: &mut usize) {
    match kind {
        "collected" => o.collected = true,
        "item" => {
            // A test created twice (loaded by two names) keeps what its body did.
            o.items.entry(id).or_insert(Item {
                body: Body::NotRun,
                xfail_marked: extra == "xfail",
                entered: None,
                reentered: false,
            });
        }
        "unobserved" => o.unobserved.push(id),
        "filedoc" => {
            o.file_docs.insert(extra.to_string());
        }
        "doc" => {
            let ids = o.docs.entry(extra.to_string()).or_default();
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        "replaced" => {
            o.replaced.entry(id).or_insert_with(|| extra.to_string());
        }
        "enter" | "return" | "raise" => {
            if let Some(item) = o.items.get_mut(&id) {
                if kind == "enter" {
                    item.entered = Some(*entered);
                    *entered += 1;
                }
                item.body = match kind {
                    "enter" => Body::Entered,
                    "return" => Body::Returned,
                    _ => {
                        let (exception, expected) = match extra.split_once(' ') {
                            Some((e, "expected")) => (e, true),
                            _ => (extra, false),
                        };
                        Body::Raised {
                            exception: exception.to_string(),
                            expected,
                        }
                    }
                };
            }
        }
        _ => {}
    }
}

/// What the report says of the observer.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ObserverReport {
    /// The runner's interpreter loaded the observer.
    pub loaded: bool,
    /// Tests whose bodies it watched.
    pub observed: usize,
    /// Why the run as a whole is not trusted: the observer did not load, its records were
    /// forged or cut short, the run never finished.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
    /// Tests the log reports passed that the observer did not see pass, each with what it saw.
    pub disagreements: Vec<Disagreement>,
}

/// A test the log reports passed that the observer did not see pass. In `report.json`:
/// `{"id": "t.py::g", "seen": "raised", "exception": "AssertionError"}`; as text (problems,
/// messages) `t.py::g: its body raised AssertionError`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(from = "DisagreementWire")]
pub struct Disagreement {
    /// The test as the log and the task's lists name it.
    pub id: String,
    #[serde(flatten)]
    pub seen: Seen,
}

/// What the observer saw of a test the log reports passed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "seen", rename_all = "snake_case")]
pub enum Seen {
    /// Its body raised `exception` (not an xfail the test declared).
    Raised { exception: String },
    /// Its body was entered and never returned.
    NeverReturned,
    /// Its body raised, and was then run again (pytest runs it once).
    RunAgain,
    /// It was collected and its body never ran.
    NeverRan,
    /// No such test was collected, and collection finished.
    NeverCollected,
    /// No such test was collected, and collection never finished.
    CollectionUnfinished,
    /// What ran as the test is not the test file's code; `why` says what the observer found.
    Replaced { why: String },
    /// A FAIL_TO_PASS test the log reports skipped: the gold patch made it pass, so a skip is
    /// the patch's doing (a skip raised on the buggy path, failures turned into skips, a skip
    /// condition the project's code decides), and the fix is not shown.
    Skipped,
    /// A test the log reports skipped whose body raised `exception`, not a skip.
    SkippedAfterRaising { exception: String },
    /// Read from a report of schema 4 or older, where a disagreement was one line of text
    /// (`id: what was seen`): what it said.
    Text { text: String },
}

/// A disagreement as reports hold it: data since schema 5, a line of text before.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum DisagreementWire {
    Data {
        id: String,
        #[serde(flatten)]
        seen: Seen,
    },
    Text(String),
}

impl From<DisagreementWire> for Disagreement {
    fn from(w: DisagreementWire) -> Disagreement {
        match w {
            DisagreementWire::Data { id, seen } => Disagreement { id, seen },
            DisagreementWire::Text(line) => {
                let (id, text) = line.split_once(": ").unwrap_or((line.as_str(), ""));
                let seen = Seen::Text { text: text.into() };
                Disagreement::new(id, seen)
            }
        }
    }
}

impl std::fmt::Display for Seen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Seen::Raised { exception } => write!(f, "its body raised {exception}"),
            Seen::NeverReturned => f.write_str("its body never returned"),
            Seen::RunAgain => f.write_str("its body raised and was run again"),
            Seen::NeverRan => f.write_str("its body never ran"),
            Seen::NeverCollected => f.write_str("it was never collected"),
            Seen::CollectionUnfinished => f.write_str("collection never finished"),
            Seen::Replaced { why } => f.write_str(why),
            Seen::Skipped => f.write_str("reported skipped: a FAIL_TO_PASS test must run and pass"),
            Seen::SkippedAfterRaising { exception } => {
                write!(f, "reported skipped, but its body raised {exception}")
            }
            Seen::Text { text } => f.write_str(text),
        }
    }
}

impl std::fmt::Display for Disagreement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.id, self.seen)
    }
}

impl Disagreement {
    fn new(id: &str, seen: Seen) -> Disagreement {
        Disagreement {
            id: id.to_string(),
            seen,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The disagreements as text, as problems and messages show them.
    fn texts(r: &ObserverReport) -> Vec<String> {
        r.disagreements.iter().map(ToString::to_string).collect()
    }

    /// A disagreement is data in `report.json` and reads back the same.
    #[test]
    fn disagreements_are_data_in_reports() {
        let d = Disagreement::new(
            "t.py::g",
            Seen::Raised {
                exception: "AssertionError".into(),
            },
        );
        let j = serde_json::to_value(&d).unwrap();
        assert_eq!(
            j,
            serde_json::json!({"id": "t.py::g", "seen": "raised", "exception": "AssertionError"})
        );
        assert_eq!(serde_json::from_value::<Disagreement>(j).unwrap(), d);
        let never = Disagreement::new("t.py::h", Seen::NeverCollected);
        assert_eq!(
            serde_json::to_value(&never).unwrap(),
            serde_json::json!({"id": "t.py::h", "seen": "never_collected"})
        );
        assert_eq!(never.to_string(), "t.py::h: it was never collected");
        // A schema-4 report's line of text still reads, and says the same.
        let old: Disagreement =
            serde_json::from_value(serde_json::json!("t.py::g: its body raised E")).unwrap();
        assert_eq!(old.id, "t.py::g");
        assert_eq!(old.to_string(), "t.py::g: its body raised E");
    }
    use crate::parsers::{FAILED, PASSED};

    fn rec(kind: &str, id: &str, extra: &str) -> String {
        let hex: String = id.bytes().map(|b| format!("{b:02x}")).collect();
        format!("{kind}\t{hex}\t{extra}\n")
    }

    fn key() -> RunKey {
        RunKey("ab".repeat(32))
    }

    /// `lines` (from [`rec`]) as the observer writes them: numbered and signed with [`key`].
    fn sign(lines: &str) -> String {
        let k = key();
        lines
            .lines()
            .enumerate()
            .map(|(n, l)| {
                let body = format!("7\t{n}\t{l}");
                format!("{body}\t{}\n", k.mac(body.as_bytes()))
            })
            .collect()
    }

    /// `records` read for `runner`, after the record of the one test file these tests' task has
    /// (`t.py`, as the observer reports the files it read).
    fn read(records: &str, runner: Runner) -> Observed {
        let records = rec("file", "/testbed/t.py", "") + records;
        parse(&sign(&records), runner, &key())
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
        check(&read(records, runner), runner, s, m, Semantics::Classic)
    }

    /// A pytest body entered again after it raised (a plugin calling the test a second time
    /// with another case's arguments) does not pass on its second return.
    #[test]
    fn a_body_run_again_after_it_raised_is_a_disagreement() {
        let records = rec("start", "", "1")
            + &rec("collected", "", "1")
            + &rec("item", "t.py::p[1]", "")
            + &rec("enter", "t.py::p[1]", "")
            + &rec("raise", "t.py::p[1]", "AssertionError")
            + &rec("enter", "t.py::p[1]", "")
            + &rec("return", "t.py::p[1]", "")
            + &rec("finish", "", "0");
        let m = sm(&[("t.py::p[1]", PASSED)]);
        let r = check_records(&records, Runner::Pytest, &status(&["t.py::p[1]"], &[]), &m);
        assert_eq!(texts(&r), ["t.py::p[1]: its body raised and was run again"]);
    }

    /// Skipped tests of the task's lists: a skipped FAIL_TO_PASS test is a disagreement
    /// whatever the observer saw; a skipped PASS_TO_PASS test only when its body raised
    /// something other than a skip (one skipped by its own `skipTest`/`pytest.skip`, or before
    /// its body ran, is the log's).
    #[test]
    fn skipped_tests_of_the_lists() {
        use crate::grading::GoldLists;
        let records = rec("start", "", "1")
            + &rec("collected", "", "4")
            + &[
                "t.py::f",
                "t.py::p_raised",
                "t.py::p_skip",
                "t.py::p_marker",
            ]
            .iter()
            .map(|t| rec("item", t, ""))
            .collect::<String>()
            + &rec("enter", "t.py::f", "")
            + &rec("raise", "t.py::f", "SkipTest")
            + &rec("enter", "t.py::p_raised", "")
            + &rec("raise", "t.py::p_raised", "AssertionError")
            + &rec("enter", "t.py::p_skip", "")
            + &rec("raise", "t.py::p_skip", "Skipped")
            + &rec("finish", "", "0");
        let obs = read(&records, Runner::Pytest);
        let all = [
            "t.py::f",
            "t.py::p_raised",
            "t.py::p_skip",
            "t.py::p_marker",
        ];
        let m = sm(&all.map(|t| (t, SKIPPED)));
        let f2p = vec![all[0].to_string()];
        let p2p: Vec<String> = all[1..].iter().map(|t| t.to_string()).collect();
        let gold = GoldLists {
            fail_to_pass: &f2p,
            pass_to_pass: &p2p,
            fail_to_fail: &[],
            pass_to_fail: &[],
        };
        let found = check_skips(&obs, Runner::Pytest, &gold, &m, Semantics::Classic);
        let texts: Vec<String> = found.iter().map(ToString::to_string).collect();
        assert_eq!(
            texts,
            [
                "t.py::f: reported skipped: a FAIL_TO_PASS test must run and pass",
                "t.py::p_raised: reported skipped, but its body raised AssertionError",
            ]
        );
        // Not loaded: nothing to say here (`check` reports the observer missing).
        let bare = Observed::default();
        assert!(check_skips(&bare, Runner::Pytest, &gold, &m, Semantics::Classic).is_empty());
    }

    fn status(f2p: &[&str], p2p: &[&str]) -> TestsStatus {
        let mut s = TestsStatus::default();
        s.fail_to_pass.success = f2p.iter().map(|x| x.to_string()).collect();
        s.pass_to_pass.success = p2p.iter().map(|x| x.to_string()).collect();
        s
    }

    #[test]
    fn records_follow_the_first_marker_and_forgeries_stop_the_reading() {
        let err = format!("setup\n@@DOJO_SETUP_OK\n{MARKER}\nrecords\n{MARKER}\nmore\n");
        assert_eq!(
            split_records(&err),
            Some(format!("records\n{MARKER}\nmore\n").as_str())
        );
        assert_eq!(split_records("setup only\n"), None);
        let good = sign(
            &(rec("start", "", "3.11") + &rec("collected", "", "0") + &rec("finish", "", "0")),
        );
        let o = parse(&good, Runner::Pytest, &key());
        assert!(o.loaded && o.finished && o.tampered.is_empty(), "{o:?}");
        // Two processes (a wrapper that handed the key down, and its pytest), interleaved, each
        // numbered from 0: trusted; the runner's stream must end.
        let k = key();
        let line = |pid: u32, n: u32, kind: &str| {
            let body = format!("{pid}\t{n}\t{kind}\t\t");
            format!("{body}\t{}\n", k.mac(body.as_bytes()))
        };
        let two = line(1, 0, "start") + &line(2, 0, "start") + &line(2, 1, "collected");
        let o = parse(&two, Runner::Pytest, &k);
        assert!(o.tampered.is_empty() && o.collected && !o.finished, "{o:?}");
        let o = parse(&(two.clone() + &line(2, 2, "finish")), Runner::Pytest, &k);
        assert!(o.tampered.is_empty() && o.finished, "{o:?}");
        let o = parse(&(two + &line(2, 1, "finish")), Runner::Pytest, &k);
        assert!(o.tampered[0].contains("out of order"), "{o:?}");
        // Appended without the key, renumbered, cut in the middle of a line, or signed with
        // another run's key: each is a forgery.
        let forged = format!("{good}7\t2\tfinish\t\t0\t{}\n", "0".repeat(32));
        let lines: Vec<&str> = good.lines().collect();
        let swapped = format!("{}\n{}\n", lines[1], lines[0]);
        let cut = &good[..good.len() - 5];
        let other = parse(&good, Runner::Pytest, &RunKey("cd".repeat(32)));
        for (name, o) in [
            ("appended", parse(&forged, Runner::Pytest, &key())),
            ("swapped", parse(&swapped, Runner::Pytest, &key())),
            ("cut", parse(cut, Runner::Pytest, &key())),
            ("other key", other),
        ] {
            assert!(!o.tampered.is_empty(), "{name}: {o:?}");
            let r = check(
                &o,
                Runner::Pytest,
                &status(&[], &[]),
                &sm(&[]),
                Semantics::Classic,
            );
            assert!(
                !r.agrees() && r.problems[0].starts_with("records forged"),
                "{name}: {r:?}"
            );
        }
        // A run that never recorded its end is not trusted either.
        let r = check_records(
            &rec("start", "", "3.11"),
            Runner::Pytest,
            &status(&[], &[]),
            &sm(&[]),
        );
        assert!(r.problems[0].contains("never recorded its end"), "{r:?}");
        // Known answer (RFC 4231, test case 2).
        let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(
            mac.iter().map(|x| format!("{x:02x}")).collect::<String>(),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
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
            texts(&r),
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
            + &rec("raise", "t.py::xf", "AssertionError expected")
            + &rec("raise", "t.py::xf_hack", "XFailed");
        let obs = read(&records, Runner::Pytest);
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
            ("test_inner.py::test_hello", PASSED),
        ]);
        // (`test_inner.py` is no restored test file: an inner pytester session's test, logged
        // by the outer run; the log decides it.)
        let s = status(
            &["t.py::ok", "t.py::faked", "t.py::xf", "t.py::doc"],
            &[
                "t.py::skipped_body",
                "t.py::xf_hack",
                "t.py::ghost",
                "test_inner.py::test_hello",
            ],
        );
        let r = check(&obs, Runner::Pytest, &s, &m, Semantics::Classic);
        assert_eq!(
            texts(&r),
            [
                "t.py::faked: its body raised AssertionError",
                "t.py::skipped_body: its body never ran",
                "t.py::xf_hack: its body raised XFailed",
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
        assert_eq!(texts(&r), ["t.py::T::g[a: its body raised AssertionError"]);
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
            texts(&r),
            ["t.py::f[``other one``-y]: its body raised AssertionError"]
        );
        // A parameter that is an absolute path, logged as its last component by the official
        // `parse_log_pytest_options` (pylint's `test_stdin[/mymodule.py]`, requests-6028).
        let records = rec("start", "", "1")
            + &rec("item", "t.py::g[/tmp/pytest-1/mymodule.py]", "")
            + &rec("item", "t.py::h[/tmp/a/b.py]", "")
            + &rec("collected", "", "2")
            + &rec("return", "t.py::g[/tmp/pytest-1/mymodule.py]", "")
            + &rec("raise", "t.py::h[/tmp/a/b.py]", "AssertionError");
        let m = sm(&[
            ("t.py::g[/mymodule.py]", PASSED),
            ("t.py::h[/b.py]", PASSED),
        ]);
        let s = status(&["t.py::g[/mymodule.py]", "t.py::h[/b.py]"], &[]);
        let r = check_records(&records, Runner::Pytest, &s, &m);
        assert_eq!(
            texts(&r),
            ["t.py::h[/b.py]: its body raised AssertionError"]
        );
        // An unobserved test (a parameter the observer could not trace to a function) whose
        // node id the log squeezed and kept whole: the log's (sphinx-8621).
        let records = rec("start", "", "1")
            + &rec(
                "unobserved",
                "t.py::f[.. g::\\n\\n   t1\\n   t2-x]",
                "Function",
            )
            + &rec("item", "t.py::h", "")
            + &rec("collected", "", "2")
            + &rec("return", "t.py::h", "");
        let m = sm(&[
            ("t.py::f[.. g::\\n\\n t1\\n t2-x]", PASSED),
            ("t.py::h", PASSED),
        ]);
        for cut in ["t.py::f[..", "t.py::f[.. g::\\n\\n t1\\n t2-x]"] {
            let s = status(&[cut, "t.py::h"], &[]);
            let r = check_records(&records, Runner::Pytest, &s, &m);
            assert_eq!(texts(&r), Vec::<String>::new(), "{cut}");
        }
        // An item made at run time whose node id is a listed test's plus a blank: as an
        // unobserved twin it does not excuse the observed test that raised, and as the
        // observer records such a name in a restored file (replaced) it is a disagreement.
        let m = sm(&[("t.py::g", PASSED)]);
        let s = status(&["t.py::g"], &[]);
        let twin = rec("start", "", "1")
            + &rec("item", "t.py::g", "")
            + &rec("unobserved", "t.py::g ", "Function")
            + &rec("collected", "", "2")
            + &rec("raise", "t.py::g", "AssertionError");
        let r = check_records(&twin, Runner::Pytest, &s, &m);
        assert_eq!(texts(&r), ["t.py::g: its body raised AssertionError"]);
        let alone = rec("start", "", "1")
            + &rec("replaced", "t.py::g ", "a node name pytest does not make")
            + &rec("collected", "", "1");
        let r = check_records(&alone, Runner::Pytest, &s, &m);
        assert_eq!(texts(&r), ["t.py::g: a node name pytest does not make"]);
        assert_eq!(as_logged("t.py::f[//x/y]"), "t.py::f[//x/y]");
        assert_eq!(as_logged("t.py::f[/a/*/y]"), "t.py::f[/a/*/y]");
        // Not loaded: nothing to compare.
        let r = check(
            &Observed::default(),
            Runner::Pytest,
            &s,
            &m,
            Semantics::Classic,
        );
        assert!(!r.loaded && r.disagreements.is_empty() && !r.agrees());
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
        let obs = read(&records, Runner::Unittest);
        assert!(obs.loaded && obs.collected);
        assert_eq!(obs.items.len(), 2, "{obs:?}");
        assert_eq!(obs.items["app.tests.T.test_ok"].body, Body::Returned);
        assert_eq!(read(&records, Runner::Pytest).items.len(), 1);
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
            texts(&r),
            [
                "test_faked (app.tests.T.test_faked): its body never ran",
                "test_ghost (app.tests.T): it was never collected",
            ]
        );
        // The runner never started: a test it did not create counts as not collected yet.
        let records = rec("start", "", "1");
        let r = check_records(&records, Runner::Unittest, &s, &m);
        assert!(texts(&r)[0].ends_with("collection never finished"), "{r:?}");
    }
    #[test]
    fn sympy_records_are_matched_by_function_name_the_last_body_run_deciding() {
        let records = rec("start", "", "3.9")
            + &rec("s.collected", "", "2")
            + &rec("s.item", "sympy/a/tests/test_a.py::test_x", "")
            + &rec("s.item", "sympy/a/tests/test_a.py::test_forged", "")
            + &rec(
                "s.replaced",
                "sympy/a/tests/test_a.py::test_swapped",
                "not its code",
            )
            + &rec("s.item", "sympy/b/tests/test_b.py::test_x", "")
            + &rec("s.enter", "sympy/a/tests/test_a.py::test_x", "")
            + &rec(
                "s.raise",
                "sympy/a/tests/test_a.py::test_x",
                "AssertionError",
            )
            + &rec("s.enter", "sympy/b/tests/test_b.py::test_x", "")
            + &rec("s.return", "sympy/b/tests/test_b.py::test_x", "")
            + &rec("s.enter", "sympy/a/tests/test_a.py::test_forged", "")
            + &rec("s.raise", "sympy/a/tests/test_a.py::test_forged", "Failed")
            + &rec("u.item", "app.tests.T.test_x", "")
            + &rec("s.finish", "", "");
        let obs = read(&records, Runner::Sympy);
        assert!(obs.loaded && obs.collected && obs.finished, "{obs:?}");
        assert_eq!(obs.items.len(), 2, "{obs:?}");
        // Two files' test_x: the log keeps the last line printed, the records the last body.
        assert_eq!(obs.items["test_x"].body, Body::Returned);
        let m = sm(&[
            ("test_x", PASSED),
            ("test_forged", PASSED),
            ("test_swapped", PASSED),
            ("test_ghost", PASSED),
        ]);
        let s = status(&["test_x", "test_forged"], &["test_swapped", "test_ghost"]);
        let r = check(&obs, Runner::Sympy, &s, &m, Semantics::Classic);
        assert_eq!(
            texts(&r),
            [
                "test_forged: its body raised Failed",
                "test_swapped: not its code",
                "test_ghost: it was never collected",
            ]
        );
        // A run whose runner never reached its end (its `test` replaced, `os._exit`).
        let cut: String = records.lines().take(13).map(|l| format!("{l}\n")).collect();
        let r = check(
            &read(&cut, Runner::Sympy),
            Runner::Sympy,
            &s,
            &m,
            Semantics::Classic,
        );
        assert!(
            r.problems
                .iter()
                .any(|p| p.contains("never recorded its end")),
            "{r:?}"
        );
        assert_eq!(
            Runner::Sympy.env().map(|(k, _)| k),
            Some("PYTHONHASHSEED"),
            "sympy's runner must stay in the observed process"
        );
        assert_eq!(Runner::Pytest.env(), None);
    }
    #[test]
    fn unittest_names_logged_from_docstrings_are_matched_through_the_doc_records() {
        let records = rec("start", "", "3.11")
            + &rec("u.filedoc", "", "Shared description.")
            + &rec("u.filedoc", "", "Forged description.")
            + &rec("u.filedoc", "", "Never created.")
            + &rec("u.item", "app.tests.T.test_a", "")
            + &rec("u.doc", "app.tests.T.test_a", "Shared description.")
            + &rec("u.item", "app.tests.T.test_b", "")
            + &rec("u.doc", "app.tests.T.test_b", "Shared description.")
            + &rec("u.item", "app.tests.T.test_c", "")
            + &rec("u.doc", "app.tests.T.test_c", "Forged description.")
            + &rec("u.collected", "", "3")
            + &rec("u.enter", "app.tests.T.test_a", "")
            + &rec("u.raise", "app.tests.T.test_a", "AssertionError")
            + &rec("u.enter", "app.tests.T.test_b", "")
            + &rec("u.return", "app.tests.T.test_b", "")
            + &rec("u.enter", "app.tests.T.test_c", "")
            + &rec("u.raise", "app.tests.T.test_c", "AssertionError")
            + &rec("u.finish", "", "");
        let obs = read(&records, Runner::Unittest);
        assert_eq!(obs.docs["Shared description."].len(), 2, "{obs:?}");
        assert_eq!(obs.file_docs.len(), 3);
        let m = sm(&[
            ("Shared description.", PASSED),
            ("Forged description.", PASSED),
            ("Never created.", PASSED),
            ("A docstring of a test outside the restored files.", PASSED),
        ]);
        let s = status(
            &["Shared description.", "Forged description."],
            &[
                "Never created.",
                "A docstring of a test outside the restored files.",
            ],
        );
        let r = check(&obs, Runner::Unittest, &s, &m, Semantics::Classic);
        // Two tests share a docstring: one of them returning is enough (the log kept one
        // line of theirs); a docstring of one test is that test's.
        assert_eq!(
            texts(&r),
            [
                "Forged description.: its body raised AssertionError",
                "Never created.: it was never collected",
            ]
        );
    }
}
