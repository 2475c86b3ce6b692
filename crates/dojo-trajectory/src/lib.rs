//! # dojo-trajectory: one JSON object per rollout
//!
//! Pipeline position: task → sandbox → agent ⇄ policy → **trajectory** → grade → curate → train.
