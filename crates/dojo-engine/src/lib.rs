//! # dojo-engine: the embedded model
//!
//! Pipeline position: the **policy** that always works offline.
