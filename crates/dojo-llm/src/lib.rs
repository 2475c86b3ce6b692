//! # dojo-llm: talking to policies over HTTP
//!
//! Pipeline position: task → sandbox → agent ⇄ **policy** → trajectory → grade → curate → train.
