//! # dojo-agent: the agent loop and its tools
//!
//! Pipeline position: task → sandbox → **agent** ⇄ policy → trajectory → grade → curate → train.
