//! # dojo-patch: a diff, read once
//!
//! Pipeline position: under everything that reads a patch: the sandbox admitting one, grading
//! (guard, test-file restore), gold replay, synthesis, selection. One model of a unified diff
//! with git's semantics ([`Patch`]), one path check ([`check_path`]), the harness's own
//! reading where parity needs it ([`harness_targets`]), and the one rule for test files
//! ([`is_test_file`], [`id_file`]).
//!
//! Why not a crate from the registry: `diffy` reads one file's `---`/`+++` and hunks, without
//! git's extended headers (renames, copies, modes, binary) or its quoted paths; a reader that
//! misses `"b/conf\164est.py"` lets a patch write `conftest.py` past a guard.
//! `tests/git_agreement.rs` checks this reader against `git apply --numstat` on generated
//! patches.

mod harness;
mod parse;
mod path;
mod quote;
mod test_files;

pub use harness::harness_targets;
pub use parse::{Change, FileDiff, Hunk, Line, LineKind, Patch, Problem};
pub use path::{Refusal, check_path, check_symlink};
pub use quote::{quote_c, shell_quote, shell_word, unquote_c};
pub use test_files::{id_file, is_pytest_module, is_test_file};
