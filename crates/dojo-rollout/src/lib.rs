//! # dojo-rollout: run agents on tasks, k times, and keep every trajectory
//!
//! Pipeline position: task → sandbox → agent ⇄ policy → trajectory → grade: **rollout** drives them all.
