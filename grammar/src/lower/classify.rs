//! Steps 2 and 3 of lowering: which rules are regular (with Tarjan's components, callees
//! first), and their sizes.

use super::*;

/// What steps 2 and 3 of [`lower`] find out about each rule.
pub(super) struct Classes {
    /// Inlined into its callers' lexemes.
    pub(super) regular: Vec<bool>,
    /// Regular whatever the inlining policy says (what `&` and `~` operands may
    /// reference), with its size in `intrinsic_units`.
    pub(super) intrinsic: Vec<bool>,
    pub(super) intrinsic_units: Vec<usize>,
    pub(super) rule_units: Vec<usize>,
    /// Regular rules that match "" (others count as if they might).
    pub(super) rule_empty: Vec<bool>,
}

/// Steps 2 and 3 of [`lower`]: the regular rules, callees before callers (in `sccs`,
/// Tarjan's order), and their sizes (expansions memoized, callees first). A size over the
/// limit is `(size, span)`.
pub(super) fn classify(
    rules: &[RuleAst],
    index: &FxHashMap<&str, usize>,
    refs: &[Vec<usize>],
    opaque: &[bool],
    sccs: &[Vec<usize>],
    limits: &crate::Limits,
    inline_units: Option<usize>,
) -> Result<Classes, (usize, Span)> {
    let n = rules.len();
    let mut c = Classes {
        regular: vec![false; n],
        intrinsic: vec![false; n],
        intrinsic_units: vec![1usize; n],
        rule_units: vec![1usize; n],
        rule_empty: vec![true; n],
    };
    let mut inline_depth = vec![0u32; n];
    let mut rule_shape = vec![1usize; n];
    for scc in sccs {
        let recursive = scc.len() > 1 || refs[scc[0]].contains(&scc[0]);
        for &r in scc {
            let empty = |j: usize| c.rule_empty[j];
            if recursive
                || opaque[r]
                || refs[r].iter().any(|&j| !c.intrinsic[j])
                || has_big_repeat(
                    &rules[r].body,
                    index,
                    &c.intrinsic,
                    &c.intrinsic_units,
                    &empty,
                )
            {
                continue;
            }
            let depth =
                rules[r].body.depth + refs[r].iter().map(|&j| inline_depth[j]).max().unwrap_or(0);
            if depth <= limits.max_inline_depth {
                c.intrinsic[r] = true;
                c.regular[r] = refs[r].iter().all(|&j| c.regular[j]);
                inline_depth[r] = depth;
            }
        }
        for &r in scc {
            let empty = |j: usize| c.rule_empty[j];
            let body = &rules[r].body;
            let u = units(
                body,
                index,
                &c.regular,
                &c.rule_units,
                &empty,
                limits.max_grammar_size,
            )?;
            // A regular rule's references are all regular: the same count. Only rules that
            // reference demoted ones are counted again.
            if c.regular[r] {
                c.intrinsic_units[r] = u;
            } else if c.intrinsic[r] {
                c.intrinsic_units[r] = units(
                    body,
                    index,
                    &c.intrinsic,
                    &c.intrinsic_units,
                    &empty,
                    usize::MAX,
                )
                .unwrap_or(usize::MAX);
            }
            if c.regular[r] {
                c.rule_empty[r] = matches_empty(body, index, &empty);
                let shape = shape_units(body, index, &c.regular, &rule_shape);
                if inline_units.is_some_and(|n| shape > n) {
                    c.regular[r] = false;
                } else {
                    c.rule_units[r] = u;
                    rule_shape[r] = shape;
                }
            }
        }
    }
    Ok(c)
}

/// Rules reachable from `start` through rules that are not inlined.
pub(super) fn reachable_rules(start: usize, refs: &[Vec<usize>], regular: &[bool]) -> Vec<bool> {
    let mut reachable = vec![false; refs.len()];
    let mut stack = vec![start];
    reachable[start] = true;
    while let Some(r) = stack.pop() {
        if regular[r] {
            continue;
        }
        for &j in &refs[r] {
            if !reachable[j] {
                reachable[j] = true;
                stack.push(j);
            }
        }
    }
    reachable
}

/// Strongly connected components of a graph given as adjacency lists, in Tarjan's output
/// order: every component comes after the components it points to. Iterative, so deep
/// reference chains cannot overflow the stack.
pub(crate) fn tarjan_sccs(adj: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let n = adj.len();
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0usize; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut sccs = Vec::new();
    let mut next = 0usize;
    let mut call: Vec<(usize, usize)> = Vec::new();
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        call.push((root, 0));
        while let Some(&(v, child)) = call.last() {
            if child == 0 && index[v] == usize::MAX {
                index[v] = next;
                low[v] = next;
                next += 1;
                stack.push(v);
                on_stack[v] = true;
            }
            if let Some(&w) = adj[v].get(child) {
                call.last_mut().expect("non-empty").1 += 1;
                if index[w] == usize::MAX {
                    call.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            call.pop();
            if let Some(&(parent, _)) = call.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut scc = Vec::new();
                loop {
                    let w = stack.pop().expect("v is on the stack");
                    on_stack[w] = false;
                    scc.push(w);
                    if w == v {
                        break;
                    }
                }
                sccs.push(scc);
            }
        }
    }
    sccs
}

#[cfg(test)]
mod tests {
    use super::tarjan_sccs;

    #[test]
    fn sccs_come_callees_first() {
        // 0 -> 1 -> 2 -> 1, 2 -> 3
        let adj = vec![vec![1], vec![2], vec![1, 3], vec![]];
        let sccs = tarjan_sccs(&adj);
        let pos = |v: usize| sccs.iter().position(|s| s.contains(&v)).unwrap();
        assert!(pos(3) < pos(1));
        assert_eq!(pos(1), pos(2));
        assert!(pos(1) < pos(0));
    }
}
