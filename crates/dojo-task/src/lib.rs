//! # dojo-task: what a task is
//!
//! Pipeline position: **task** → sandbox → agent ⇄ policy → trajectory → grade → curate → train.
//! The SWE-bench instance schema (and SWE-Gym / SWE-smith / SWE-rebench variants), strict loaders
//! for JSON, JSONL and Parquet, and the per-repository environment specs (TOML).
