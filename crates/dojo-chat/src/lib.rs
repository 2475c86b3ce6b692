//! # dojo-chat: tokens exactly as the model sees them
//!
//! Shared by the embedded engine (generation) and curate/train (token-exact training data).
