//! Embeds every `envs/**/*.toml` of the repository into the crate (see `src/env.rs`), so the
//! binary carries the environment specs without a checkout.

use std::path::{Path, PathBuf};

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(&p, out);
        } else if p.extension().is_some_and(|x| x == "toml") {
            out.push(p);
        }
    }
}

fn main() {
    let manifest = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    );
    let envs = manifest.join("../../envs");
    // A directory path makes cargo rerun when anything below it changes.
    println!("cargo:rerun-if-changed={}", envs.display());
    let mut files = Vec::new();
    collect(&envs, &mut files);
    files.sort();
    let mut code = String::from("pub static EMBEDDED: &[(&str, &str)] = &[\n");
    for f in &files {
        let rel = f.strip_prefix(&envs).unwrap_or(f).display().to_string();
        let abs = f.canonicalize().unwrap_or_else(|_| f.clone());
        code.push_str(&format!(
            "    ({rel:?}, include_str!({:?})),\n",
            abs.display().to_string()
        ));
    }
    code.push_str("];\n");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"))
        .join("embedded_envs.rs");
    std::fs::write(&out, code).expect("writing embedded_envs.rs into OUT_DIR");
}
