//! # dojo-curate: from raw rollouts to training data
//!
//! Pipeline position: task → sandbox → agent ⇄ policy → trajectory → grade → **curate** → train.
