//! # dojo-grade: verdicts equal to the official SWE-bench harness
//!
//! Pipeline position: task → sandbox → agent ⇄ policy → trajectory → **grade** → curate → train.
