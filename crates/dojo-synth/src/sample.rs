//! The order candidates are tried in: seeded, deterministic and balanced across operators and
//! files.
//!
//! The seed drives a keyed hash (sha256 of seed and a stable key), not a stateful generator:
//! the rank of a candidate depends only on the seed and its own id, so the order is the same on
//! every machine and Rust/`rand` version, and adding a file to a project does not reshuffle the
//! others. Balance: operators take turns (round robin, in a seeded order); within an operator,
//! files take turns; within a file, mutations come in seeded order. A `--max` cut of the
//! stream therefore spreads over operators and files instead of exhausting the first ones.

use std::collections::BTreeMap;

use crate::operators::{Mutation, Operator};

fn rank(seed: u64, key: &str) -> String {
    dojo_cache::sha256_hex(format!("synth-order-v1\0{seed}\0{key}"))
}

/// Round robin over groups (each already ordered), in the given group order.
fn interleave<T>(groups: Vec<Vec<T>>) -> Vec<T> {
    let total = groups.iter().map(Vec::len).sum();
    let mut iters: Vec<std::vec::IntoIter<T>> = groups.into_iter().map(Vec::into_iter).collect();
    let mut out = Vec::with_capacity(total);
    while out.len() < total {
        for it in iters.iter_mut() {
            if let Some(x) = it.next() {
                out.push(x);
            }
        }
    }
    out
}

/// The try order of `mutations` for `seed`.
pub fn order(mutations: Vec<Mutation>, seed: u64) -> Vec<Mutation> {
    let mut by_op: BTreeMap<Operator, BTreeMap<String, Vec<(String, Mutation)>>> = BTreeMap::new();
    for m in mutations {
        let key = rank(seed, &m.id());
        by_op
            .entry(m.operator)
            .or_default()
            .entry(m.file.clone())
            .or_default()
            .push((key, m));
    }
    let mut ops: Vec<(String, Vec<Mutation>)> = by_op
        .into_iter()
        .map(|(op, files)| {
            let mut files: Vec<(String, Vec<Mutation>)> = files
                .into_iter()
                .map(|(file, mut ms)| {
                    ms.sort_by(|a, b| a.0.cmp(&b.0));
                    (
                        rank(seed, &format!("{op}\0{file}")),
                        ms.into_iter().map(|(_, m)| m).collect(),
                    )
                })
                .collect();
            files.sort_by(|a, b| a.0.cmp(&b.0));
            (
                rank(seed, op.name()),
                interleave(files.into_iter().map(|(_, v)| v).collect()),
            )
        })
        .collect();
    ops.sort_by(|a, b| a.0.cmp(&b.0));
    interleave(ops.into_iter().map(|(_, v)| v).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operators::mutations_in;

    fn sample() -> Vec<Mutation> {
        let a =
            "def f(a, b):\n    if a < b and b > 0:\n        return a + 1\n    return g(a, b) - 2\n";
        let b = "def h(x):\n    while x >= 3:\n        x -= 1\n    return not x\n";
        let mut v = mutations_in("a.py", a, Operator::ALL).unwrap().mutations;
        v.extend(mutations_in("b.py", b, Operator::ALL).unwrap().mutations);
        v
    }

    #[test]
    fn same_seed_same_order_and_a_permutation() {
        let base = sample();
        let o1 = order(base.clone(), 7);
        let o2 = order(base.clone(), 7);
        assert_eq!(o1, o2);
        let o3 = order(base.clone(), 8);
        assert_ne!(o1, o3);
        let mut ids: Vec<String> = o1.iter().map(Mutation::id).collect();
        let mut want: Vec<String> = base.iter().map(Mutation::id).collect();
        ids.sort();
        want.sort();
        assert_eq!(ids, want);
        // Input order does not matter.
        let mut rev = base;
        rev.reverse();
        assert_eq!(order(rev, 7), o1);
    }

    #[test]
    fn operators_take_turns() {
        let o = order(sample(), 1);
        let n_ops = o
            .iter()
            .map(|m| m.operator)
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        let first: std::collections::BTreeSet<Operator> =
            o.iter().take(n_ops).map(|m| m.operator).collect();
        assert_eq!(first.len(), n_ops, "the first {n_ops} are one per operator");
    }
}
