//! The SWE-bench harness's own reading of a patch, kept apart from [`crate::Patch`] on purpose:
//! where the harness's regex and git disagree (quoted paths, names with ` b/` in them), the
//! harness's answer is what the official grade used, so test directives must use it.

/// The files a patch touches as the harness lists them: Python's
/// `re.findall(r"diff --git a/.* b/(.*)", patch)` (anywhere in a line, the last ` b/` after
/// `diff --git a/`, the rest of the line, a trailing `\r` included). Upstream:
/// `swebench/harness/utils.py` `get_modified_files` / `get_test_directives`.
pub fn harness_targets(patch: &str) -> Vec<String> {
    patch
        .split('\n')
        .filter_map(|l| {
            l.find("diff --git a/")
                .map(|i| &l[i + "diff --git a/".len()..])
        })
        .filter_map(|rest| rest.rsplit_once(" b/").map(|(_, b)| b.to_string()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn as_the_regex() {
        assert_eq!(
            harness_targets(
                "diff --git a/x b/y\nfoo diff --git a/a b/b b/c\r\n\"diff --git \"a/q\" \"b/q\""
            ),
            ["y", "c\r"]
        );
    }
}
