//! # dojo-grade: verdicts equal to the official SWE-bench harness
//!
//! Pipeline position: task → sandbox → agent ⇄ policy → trajectory → **grade** → curate → train.
//!
//! A reward is only as good as its grader, and users compare numbers across systems, so this
//! crate reproduces `swebench==5.0.2`'s log parsers exactly and its grading rules under two
//! documented rule sets ([`Semantics::Classic`], the default, and [`Semantics::Swebench5`]).
//! A differential test (`tests/differential.rs`) runs the official Python functions on every
//! real log in `../shared/data` and on our own logs and requires zero disagreements.
//!
//! - [`parsers`]: [`Parser`] (pytest, pytest v2, pytest_options, django, sympy, seaborn,
//!   matplotlib and the per-repository aliases) → [`StatusMap`].
//! - [`grading`]: [`logs_eval`] (`get_logs_eval`), [`eval_tests_report`] (`get_eval_tests_report`),
//!   [`resolution_status`], [`derive_lists`] (validation: the lists `dojo validate --write`
//!   stores).
//! - [`report`]: [`InstanceReport`] (`report.json`, official keys + `schema_version`, outcome,
//!   error kind) and [`RunSummary`] (`resolved_ids`, `unresolved_ids`, `error_ids`,
//!   `empty_patch_ids`, counts).
//! - [`run`]: [`grade_in_sandbox`] and [`validate_in_sandbox`], the harness flow in a
//!   [`dojo_sandbox::Sandbox`]. Infrastructure failures (environment, test patch, timeout,
//!   runner) are [`ErrorKind`]s with `infra_failure = true`, never "unresolved".
//! - [`guard`]: which paths of a model patch are test infrastructure ([`InfraKind`]): the
//!   task's test files are restored; conftest / pytest configuration / interpreter startup
//!   files, runner shadows and package metadata make the patch unresolved.
//! - [`observer`]: the test observer, a pytest plugin loaded ahead of the project's code that
//!   records which test bodies ran and how they ended; a test the log reports passed counts
//!   only if the observer saw it pass (where a pytest process loaded it).
//! - [`task_check`]: `dojo tasks check`'s findings on a task file (invalid rows, missing grading
//!   fields and environments, ids no parser can match).
//! - [`diagnose`]: `dojo validate`'s one-line rows and id-list summaries (full text to files).
//! - [`batch`]: `dojo eval` / `dojo validate` over many instances (resumable, concurrent,
//!   progress bar, sandboxes torn down in the background).
//! - [`red_team`]: the generated attacks the grading tests hold (behaviours × moments × runners).
//! - [`predictions`]: the SWE-bench predictions record, [`read_predictions`] (bad lines reported
//!   with their line numbers) and [`write_predictions`].

pub mod batch;
pub mod diagnose;
pub mod grading;
pub mod guard;
mod ini;
pub mod observer;
pub mod parsers;
pub mod predictions;
pub mod red_team;
pub mod report;
pub mod run;
mod script;
pub mod task_check;

pub use grading::{
    EvalType, GoldLists, ResolvedStatus, Semantics, SuccessFailure, TestsStatus, derive_lists,
    eval_tests_report, is_truncated_id, logs_eval, parse_test_exit_code, read_log_text,
    resolution_status,
};
pub use guard::{InfraKind, InfraTouch};
pub use parsers::{Parser, StatusMap};
pub use predictions::{Prediction, read_predictions, write_predictions};
pub use report::{
    ErrorKind, InstanceReport, MalformedLine, RunSummary, SCHEMA_VERSION, Validation, Verdict,
    eval_report_from_log,
};
pub use run::{GradeOptions, grade_in_sandbox, grade_once, status_map_of, validate_in_sandbox};
