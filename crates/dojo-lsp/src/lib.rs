//! # dojo-lsp: IDE-grade navigation tools inside each sandbox
//!
//! Pipeline position: a tool of the **agent**, run inside the rollout's sandbox.
